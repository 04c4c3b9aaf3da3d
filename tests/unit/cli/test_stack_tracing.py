"""`inferbus up`'s scaler exports spans as `inferbus scaler run` does, and flushes them."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from services.cli import stack as stack_module
from services.cli.stack import Stack
from tests.unit.cli.stacks import headless_options


def test_up_traces_as_the_scaler_and_flushes_when_it_stops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: the scaler inside `inferbus up` made no spans, so a retired model's
    requests, answered by it, had no span of the answer in Jaeger (`runtime/orphans.py`).
    A start that fails still flushes what was made."""
    events: list[str] = []

    def init_tracing(service_name: str, **_: Any) -> None:
        events.append(f"init {service_name}")

    async def start(self: Stack) -> str:
        events.append("start")
        raise RuntimeError("stubbed: no broker")

    async def close(self: Stack) -> None:
        events.append("close")

    monkeypatch.setattr(stack_module, "init_tracing", init_tracing)
    monkeypatch.setattr(stack_module, "shutdown_tracing", lambda: events.append("flush"))
    monkeypatch.setattr(Stack, "start", start)
    monkeypatch.setattr(Stack, "close", close)

    with pytest.raises(RuntimeError, match="no broker"):
        asyncio.run(Stack(headless_options(tmp_path, bootstrap="127.0.0.1:1")).run())

    assert events == ["init inferbus-scaler", "start", "close", "flush"]

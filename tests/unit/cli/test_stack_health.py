"""`inferbus up`'s scaler answers `/healthz` and `/readyz` as the standalone scaler does."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from services.cli import stack as stack_module
from services.cli.stack import Stack
from tests.unit.cli.stacks import headless_options
from tests.unit.tracing.test_health import get
from tracing.health import Health


class FakeScaler:
    """What `_serve_health` reads of a ScalerService: its readiness."""

    def __init__(self) -> None:
        self.ticks = 0

    def readiness(self) -> tuple[bool, str]:
        return (self.ticks > 0, f"{self.ticks} ticks" if self.ticks else "no decision yet")


def test_up_serves_the_scalers_health(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: under `inferbus up` `/healthz` stayed `ok: starting` and `/readyz` 503
    however many decisions the scaler took: nothing beat or served readiness."""
    health = Health()
    monkeypatch.setattr(stack_module, "HEALTH", health)
    options = headless_options(tmp_path, bootstrap="127.0.0.1:1")
    scaler = FakeScaler()

    async def scenario() -> list[tuple[str, str]]:
        stack = Stack(options)
        stack._serve_health(scaler)  # type: ignore[arg-type]
        await asyncio.sleep(0)  # the beat's first run
        seen = [get(health, "/healthz"), get(health, "/readyz")]
        scaler.ticks = 3
        seen.append(get(health, "/readyz"))
        await stack.close()
        return seen

    live, before, after = asyncio.run(scenario())

    assert live == ("200 OK", "ok: ok\n")
    assert before[0].startswith("503") and "no decision yet" in before[1]
    assert after == ("200 OK", "ok: 3 ticks\n")

"""The long-running commands tune garbage collection before they serve (`infra.gc_tuning`);
the services themselves are stubbed, so nothing starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import services.cli.common
import services.cli.main
from services.cli.main import app

EVENTS: list[str] = []


async def _serve(*args: Any, **kwargs: Any) -> None:
    EVENTS.append("served")


class _Stack:
    def __init__(self, options: Any) -> None:
        self.options = options

    async def run(self) -> None:
        EVENTS.append("served")


@pytest.mark.parametrize(
    ("args", "service"),
    [
        (["ingest"], "services.ingest.app.run_ingest"),
        (["worker", "--model", "demo-mlp"], "services.worker.app.run_worker"),
        (["scaler", "run"], "scaler.run.run_scaler"),
        (["up", "--headless"], "services.cli.stack.Stack"),
    ],
    ids=["ingest", "worker", "scaler", "up"],
)
def test_a_service_command_tunes_gc_before_it_serves(
    args: list[str],
    service: str,
    demo_models: Path,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    if args[0] == "up":  # its lock and logs: not the checkout's, where `make up` may run
        args = [*args, "--log-dir", str(tmp_path / "logs")]
    EVENTS.clear()
    monkeypatch.setattr(services.cli.common, "tune_for_service", lambda: EVENTS.append("tuned"))
    monkeypatch.setattr(services.cli.main, "tune_for_service", lambda: EVENTS.append("tuned"))
    monkeypatch.setattr(service, _Stack if service.endswith("Stack") else _serve)
    result = CliRunner().invoke(app, [*args, "--models", str(demo_models)])
    assert result.exit_code == 0, result.output
    assert EVENTS == ["tuned", "served"]


def test_a_client_command_does_not(demo_models: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    EVENTS.clear()
    monkeypatch.setattr(services.cli.common, "tune_for_service", lambda: EVENTS.append("tuned"))
    monkeypatch.setattr(services.cli.main, "tune_for_service", lambda: EVENTS.append("tuned"))

    async def infer_once(*args: Any, **kwargs: Any) -> None:
        EVENTS.append("sent")
        raise RuntimeError("stubbed: nothing is sent")

    monkeypatch.setattr("services.cli.infer.infer_once", infer_once)
    args = ["infer", "demo-mlp", "--json", '{"x": [[0.5]]}', "--models", str(demo_models)]
    CliRunner().invoke(app, args)
    assert EVENTS == ["sent"]

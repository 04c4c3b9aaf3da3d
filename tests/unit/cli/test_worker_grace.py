"""A local scale-in waits out the worker's own stop before a second SIGTERM."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from scaler.actuators.factory import make_actuator
from scaler.actuators.local import LocalActuator
from services.worker.settings import EXIT_S, NOTICE_S, STOP_AFTER_DRAIN_S, WorkerSettings


@pytest.mark.parametrize(
    ("drain_env", "expected"),
    [
        (None, NOTICE_S + 30.0 + STOP_AFTER_DRAIN_S + EXIT_S),
        ("120", NOTICE_S + 120.0 + STOP_AFTER_DRAIN_S + EXIT_S),
    ],
)
def test_the_grace_covers_the_workers_stop_limit(
    monkeypatch: pytest.MonkeyPatch, drain_env: str | None, expected: float
) -> None:
    monkeypatch.delenv("INFERBUS_WORKER_DRAIN_TIMEOUT_S", raising=False)
    if drain_env is not None:
        monkeypatch.setenv("INFERBUS_WORKER_DRAIN_TIMEOUT_S", drain_env)
    settings = WorkerSettings()
    assert settings.stop_grace_s == pytest.approx(expected)
    assert settings.stop_grace_s > settings.stop_limit_s


def test_scaler_runs_local_actuator_waits_the_grace_given(tmp_path: Path) -> None:
    """Regression: `scaler run --actuator local` cut a 42 s worker stop at 30 s."""
    grace_s = WorkerSettings().stop_grace_s
    local = make_actuator("local", bootstrap="b:1", models_dir=tmp_path, worker_grace_s=grace_s)
    assert isinstance(local, LocalActuator)
    assert local._grace_s == grace_s > WorkerSettings().stop_limit_s


def test_scaler_run_gives_its_actuator_the_workers_grace(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import scaler.run
    import services.cli.main
    from services.cli.main import app

    given: dict[str, object] = {}

    def fake_run_scaler(*args: object, **kwargs: object) -> Coroutine[Any, Any, None]:
        given.update(kwargs)
        return asyncio.sleep(0)

    monkeypatch.setenv("INFERBUS_WORKER_DRAIN_TIMEOUT_S", "50")
    monkeypatch.setattr(scaler.run, "run_scaler", fake_run_scaler)
    monkeypatch.setattr(services.cli.main, "run_service", lambda coro: coro.close())
    result = CliRunner().invoke(app, ["scaler", "run", "--models", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert given == {"worker_grace_s": NOTICE_S + 50.0 + STOP_AFTER_DRAIN_S + EXIT_S}

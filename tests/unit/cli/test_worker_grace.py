"""A scale-in under `inferbus up` waits out the worker's own stop before a second SIGTERM."""

from __future__ import annotations

import pytest

from services.cli.stack import WORKER_EXIT_S, worker_grace_s
from services.worker.settings import NOTICE_S, STOP_AFTER_DRAIN_S, WorkerSettings


@pytest.mark.parametrize(
    ("drain_env", "given", "expected"),
    [
        (None, None, NOTICE_S + 30.0 + STOP_AFTER_DRAIN_S + WORKER_EXIT_S),
        ("120", None, NOTICE_S + 120.0 + STOP_AFTER_DRAIN_S + WORKER_EXIT_S),
        ("120", 7.0, 7.0 + WORKER_EXIT_S),
    ],
)
def test_the_grace_covers_the_workers_stop_limit(
    monkeypatch: pytest.MonkeyPatch, drain_env: str | None, given: float | None, expected: float
) -> None:
    monkeypatch.delenv("INFERBUS_WORKER_DRAIN_TIMEOUT_S", raising=False)
    if drain_env is not None:
        monkeypatch.setenv("INFERBUS_WORKER_DRAIN_TIMEOUT_S", drain_env)
    assert worker_grace_s(given) == pytest.approx(expected)


def test_the_default_grace_outlasts_a_default_workers_stop() -> None:
    """Regression: the actuator's 30 s cut a stop that may take 42 s (a drain of 30)."""
    assert worker_grace_s(None) > WorkerSettings().stop_limit_s

"""How many runtime threads the embedded broker (Tansu) is started with."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from infra.broker import broker_environment, default_broker_threads
from infra.settings import BrokerSettings


@pytest.mark.parametrize(
    ("cores", "threads"),
    [(1, 1), (2, 1), (4, 1), (7, 1), (8, 2), (16, 4), (64, 16)],
)
def test_a_thread_per_four_cores_at_least_one(cores: int, threads: int) -> None:
    assert default_broker_threads(cores) == threads


def test_the_thread_count_replaces_one_in_the_environment() -> None:
    env = broker_environment(3, {"PATH": "/bin", "TOKIO_WORKER_THREADS": "9"})
    assert env == {"PATH": "/bin", "TOKIO_WORKER_THREADS": "3"}


def test_the_setting_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERBUS_BROKER_THREADS", "2")
    assert BrokerSettings().broker_threads == 2
    monkeypatch.delenv("INFERBUS_BROKER_THREADS")
    assert BrokerSettings().broker_threads is None


def test_zero_threads_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERBUS_BROKER_THREADS", "0")
    with pytest.raises(ValidationError, match="broker_threads"):
        BrokerSettings()

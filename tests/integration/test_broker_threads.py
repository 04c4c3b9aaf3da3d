"""The embedded broker (Tansu) runs the runtime threads `INFERBUS_BROKER_THREADS` asks for."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from infra.broker import EmbeddedBroker
from infra.settings import BrokerSettings

pytestmark = pytest.mark.integration


def _runtime_threads(pid: int) -> int:
    """Tansu's Tokio runtime names its worker threads `tokio-rt-worker` (counted just after
    the start, before any blocking-pool thread exists)."""
    tasks = Path(f"/proc/{pid}/task")
    names = [(task / "comm").read_text().strip() for task in tasks.iterdir()]
    return sum(name == "tokio-rt-worker" for name in names)


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux /proc")
@pytest.mark.parametrize("threads", [1, 3])
def test_tansu_runs_the_threads_asked_for(threads: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TOKIO_WORKER_THREADS", raising=False)
    settings = BrokerSettings(broker_threads=threads)
    with EmbeddedBroker(settings, port=0) as broker:
        assert broker.pid is not None
        environ = Path(f"/proc/{broker.pid}/environ").read_bytes().split(b"\0")
        assert f"TOKIO_WORKER_THREADS={threads}".encode() in environ
        assert _runtime_threads(broker.pid) == threads
    assert "TOKIO_WORKER_THREADS" not in os.environ  # set for the broker alone

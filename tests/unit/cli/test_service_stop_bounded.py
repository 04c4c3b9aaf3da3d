"""A service told to stop is gone within a bounded time when the broker is away, and says
what it gave up. Before: every step that needed the broker waited the Kafka client's 30 s
request timeout, one after another, in silence: ingest took 3.5 minutes after SIGTERM,
a worker 2 minutes, the scaler 3 (each of a tick's decision records, one group after
another)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from scaler import run as scaler_run
from services.ingest import app as ingest_app
from services.ingest.app import IngestService
from services.ingest.settings import IngestSettings
from services.models.demo import write_demo_models
from services.worker import app as worker_app
from services.worker.app import Worker
from services.worker.settings import WorkerSettings


async def _broker_away(*args: Any) -> None:
    """A request to a broker that is gone: no answer (the client's timeout is 30 s)."""
    await asyncio.sleep(3600)


async def _quick(*args: Any) -> None:
    return None


async def test_ingest_stop_with_the_broker_away_ends_within_its_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(ingest_app, "STOP_LIMIT_S", 0.6)
    monkeypatch.setattr(ingest_app, "NOTICE_S", 0.1)
    write_demo_models(tmp_path)
    ingest = IngestService("127.0.0.1:1", IngestSettings(models_dir=tmp_path))
    monkeypatch.setattr(ingest.membership, "announce_leaving", _broker_away)
    monkeypatch.setattr(ingest.membership, "stop_refresh", _quick)
    monkeypatch.setattr(ingest.telemetry, "stop", _broker_away)
    monkeypatch.setattr(ingest.depths, "stop", _quick)
    monkeypatch.setattr(ingest.producer, "stop", _broker_away)
    for consumer in ingest.consumers:
        monkeypatch.setattr(consumer, "close", _broker_away)
    poll = asyncio.create_task(_broker_away(), name="a poll retrying until taken")
    ingest._polls.add(poll)
    ingest._started = ingest._producer_up = True

    started = time.monotonic()
    with caplog.at_level(logging.INFO):
        await asyncio.wait_for(ingest.stop(), 5.0)

    assert time.monotonic() - started < 1.5
    assert "event=stopping service=ingest limit_s=" in caplog.text
    assert "step=polls_in_flight" in caplog.text
    assert "1 poll(s) being routed: not committed" in caplog.text
    assert "event=ingest_stopped" in caplog.text
    await asyncio.sleep(0)
    assert poll.cancelled()


async def test_worker_stop_with_the_broker_away_ends_within_its_limit(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(worker_app, "STOP_AFTER_DRAIN_S", 0.5)
    monkeypatch.setattr(worker_app, "NOTICE_S", 0.1)
    worker = Worker("localhost:1", WorkerSettings(model="demo-mlp", drain_timeout_s=0.2))
    monkeypatch.setattr(worker.membership, "announce_leaving", _broker_away)
    monkeypatch.setattr(worker.membership, "stop_refresh", _quick)
    monkeypatch.setattr(worker.producer, "stop", _broker_away)
    monkeypatch.setattr(worker.host, "close", _quick)
    worker.pipeline = SimpleNamespace(  # type: ignore[assignment]
        drain_all=_quick, settle=_broker_away, counts=Counter[str]()
    )
    worker.consumers = {"batch": SimpleNamespace(close=_broker_away)}  # type: ignore[dict-item]
    worker._telemetry = SimpleNamespace(stop=_broker_away)  # type: ignore[assignment]
    worker._started = worker._producer_up = True

    started = time.monotonic()
    with caplog.at_level(logging.INFO):
        await asyncio.wait_for(worker.stop(), 5.0)

    # The draining notice (0.1 s), then 0.5 s for the rest: the drain ended at once.
    assert time.monotonic() - started < 1.2
    assert "event=stopping service=worker limit_s=" in caplog.text
    assert "step=answers_in_flight" in caplog.text
    assert "event=worker_stopped" in caplog.text


async def test_scaler_stop_gives_the_tick_in_progress_its_limit(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(scaler_run, "STOP_LIMIT_S", 0.3)
    stop = asyncio.Event()
    ticking = asyncio.create_task(_broker_away(), name="a tick publishing its decisions")
    asyncio.get_running_loop().call_later(0.05, stop.set)

    started = time.monotonic()
    with caplog.at_level(logging.INFO):
        deadline = await asyncio.wait_for(scaler_run.tick_until(stop, ticking), 5.0)

    assert time.monotonic() - started < 1.0
    assert deadline is not None
    assert deadline.gave_up == ["the rest of this tick's decisions and their records"]
    await asyncio.sleep(0)
    assert ticking.cancelled()

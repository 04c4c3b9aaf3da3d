"""A background loop's failure is said and outlived: the reload loop keeps switching after
the registry missed a switch, and a stop runs to its end after a loop had died."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka.errors import KafkaTimeoutError

from infra.models.repository import ModelRepository
from infra.tasks import say_failure
from services.worker import app as app_module
from services.worker.app import Worker
from services.worker.engine_host import EngineHost
from services.worker.settings import WorkerSettings


async def test_a_switch_the_registry_missed_is_told_again_and_the_loop_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    wanted = ["2"]
    host = EngineHost(ModelRepository(tmp_path), "m", wanted=lambda: wanted[0])
    host.version = SimpleNamespace(version="1")  # type: ignore[assignment]

    async def switch_to(version: str) -> None:
        host.version = SimpleNamespace(version=version)  # type: ignore[assignment]

    host.switch_to = switch_to  # type: ignore[method-assign,assignment]
    told: list[str] = []
    failures = [KafkaTimeoutError("broker away")]
    told_again = asyncio.Event()

    async def on_switched() -> None:
        if failures:
            raise failures.pop()
        assert host.version is not None
        told.append(host.version.version)
        told_again.set()

    with caplog.at_level(logging.ERROR, logger="services.worker.engine_host"):
        loop = asyncio.create_task(host.reload_loop(0.01, on_switched))
        try:
            await asyncio.wait_for(told_again.wait(), 2.0)
            assert told == ["2"], "the missed switch is told in a later round"
            told_again.clear()
            wanted[0] = "3"
            await asyncio.wait_for(told_again.wait(), 2.0)
            assert told == ["2", "3"], "and the loop still switches"
            assert not loop.done()
        finally:
            loop.cancel()
            await asyncio.gather(loop, return_exceptions=True)
            await host.close()
    assert "event=switch_untold model=m version=2" in caplog.text


async def test_stop_runs_to_its_end_after_a_background_task_failed(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    worker = Worker("localhost:1", WorkerSettings(model="demo-mlp"))
    steps: list[str] = []

    def step(name: str) -> Any:
        async def record(*args: Any) -> None:
            steps.append(name if not args else f"{name}:{args[0]}")

        return record

    monkeypatch.setattr(worker.membership, "announce_leaving", step("announce"))
    monkeypatch.setattr(worker.membership, "stop_refresh", step("stop_refresh"))
    monkeypatch.setattr(worker.producer, "stop", step("producer_stop"))
    monkeypatch.setattr(worker.host, "close", step("host_close"))
    worker.pipeline = SimpleNamespace(  # type: ignore[assignment]
        drain_all=step("drain_all"), settle=step("settle"), counts=Counter[str]()
    )
    worker.consumers = {"batch": SimpleNamespace(close=step("consumer_close"))}  # type: ignore[dict-item]

    async def publish_fails() -> None:
        raise KafkaTimeoutError("broker away")

    async def polls() -> None:
        await asyncio.Event().wait()

    with caplog.at_level(logging.ERROR, logger=app_module.__name__):
        reload = asyncio.create_task(publish_fails(), name="reload")
        say_failure(reload, app_module.log)
        worker._tasks = [asyncio.create_task(polls(), name="poll-batch"), reload]
        await asyncio.wait({reload})
        assert "event=task_failed task=reload" in caplog.text, "said when it failed"
        worker._started = worker._producer_up = True
        await asyncio.wait_for(worker.stop(), 2.0)
    assert steps == [
        "announce:draining",
        "drain_all:30.0",
        "settle",
        "consumer_close",
        "stop_refresh",
        "announce:gone",
        "producer_stop",
        "host_close",
    ]
    assert worker.stopped.is_set()
    assert all(task.done() for task in worker._tasks)
    monkeypatch.undo()
    await worker.producer.stop()  # never started: closes its client

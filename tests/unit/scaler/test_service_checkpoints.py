"""The scaler writes its memory beside its decisions every few minutes, and only where a
restart can start from it (`scaler/checkpoint.py`; read back in tests/unit/scaler/
test_recall.py and, on the broker, tests/integration/test_recall.py)."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from aiokafka.errors import KafkaConnectionError

import scaler.service
from scaler.checkpoint import CHECKPOINT_EVERY_S, CHECKPOINT_RETRY_S
from scaler.collector.collector import GroupCollection, GroupTarget
from scaler.service import ScalerService
from scaler.signals import GroupState, ScalerState
from tests.unit.scaler.conftest import make_signals
from tests.unit.scaler.test_retired_groups import Counted

GROUP = "inferbus.workers.m.interactive"
OTHER = "inferbus.workers.m.batch"


class Records:
    """A producer that keeps what it is sent, or fails while `down`."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.down = False

    async def send_and_wait(self, topic: str, value: bytes, key: bytes) -> None:
        if self.down:
            raise KafkaConnectionError("the broker went away")
        self.sent.append(json.loads(value))


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


async def _service(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[ScalerService, Records, Clock]:
    (tmp_path / "models").mkdir()
    service = ScalerService("127.0.0.1:1", tmp_path / "models", Counted(4))
    await service.collector.add_targets([GroupTarget("m", "interactive")])
    records, clock = Records(), Clock(1000.0)
    service._producer = records
    monkeypatch.setattr(scaler.service.time, "time", clock)
    return service, records, clock


async def _tick(service: ScalerService, clock: Clock, **changes: Any) -> None:
    signals = make_signals(group=GROUP, collected_at=clock.now)
    await service.on_tick([GroupCollection(GROUP, signals, 0, **changes)])


async def test_the_memory_goes_with_the_first_tick_s_record_and_then_every_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    service, records, clock = await _service(tmp_path, monkeypatch)
    for _ in range(int(CHECKPOINT_EVERY_S / 5) + 1):
        await _tick(service, clock)
        clock.now += 5.0
    carried = [r["tick_at"] for r in records.sent if r["state"] is not None]
    assert carried == [1000.0, 1000.0 + CHECKPOINT_EVERY_S]
    first = next(r for r in records.sent if r["state"] is not None)
    assert first["state"]["of_groups"] == [GROUP]
    assert first["state"]["fields"]["observed_since"] == 1000.0


async def test_an_idle_group_s_hold_left_out_is_written_when_it_carries_the_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An idle group's unchanged hold is written once per `idle_hold_every_s` (25 s); the
    tick a checkpoint falls on writes it whatever that says."""
    service, records, clock = await _service(tmp_path, monkeypatch)
    idle = {"arrival_rps": 0.0, "lag": 0, "queue_p99_ms": None, "e2e_p99_ms": None}
    for _ in range(int(CHECKPOINT_EVERY_S / 5) + 1):
        signals = make_signals(group=GROUP, collected_at=clock.now, utilization=0.0, **idle)
        await service.on_tick([GroupCollection(GROUP, signals, 0)])
        clock.now += 5.0
    written = [r["tick_at"] for r in records.sent]
    assert len(written) < CHECKPOINT_EVERY_S / 5, "idle holds were left out"
    carried = [r["tick_at"] for r in records.sent if r["state"] is not None]
    assert carried == [1000.0, 1000.0 + CHECKPOINT_EVERY_S]


async def test_a_checkpoint_that_could_not_be_written_is_tried_again_within_its_retry_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not at every tick: each forces every group's record (a broker away fails them all)."""
    service, records, clock = await _service(tmp_path, monkeypatch)
    records.down = True
    await _tick(service, clock)
    records.down = False
    for _ in range(int(CHECKPOINT_RETRY_S / 5)):
        clock.now += 5.0
        await _tick(service, clock)
    retried = 1000.0 + CHECKPOINT_RETRY_S
    assert [r["tick_at"] for r in records.sent if r["state"] is not None] == [retried]


async def test_no_checkpoint_while_a_group_retires(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A retiring group leaves the memory during the tick: the memory written beside the
    tick's records would not be the one the scaler goes on with."""
    service, records, clock = await _service(tmp_path, monkeypatch)
    await _tick(service, clock, retiring="model 'm' is gone", retired_answer="model_not_found")
    assert records.sent and all(r["state"] is None for r in records.sent)
    clock.now += 5.0
    await _tick(service, clock)
    assert [r["tick_at"] for r in records.sent if r["state"] is not None] == [1005.0]


async def test_why_a_due_checkpoint_is_not_written_is_said_once_an_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    service, records, clock = await _service(tmp_path, monkeypatch)
    with caplog.at_level(logging.INFO, logger="scaler.service"):
        for _ in range(int(CHECKPOINT_EVERY_S / 5) + 1):
            await _tick(service, clock, retiring="model 'm' is gone")
            clock.now += 5.0
    said = [r.getMessage() for r in caplog.records if "checkpoint_skipped" in r.getMessage()]
    assert said == [f"event=checkpoint_skipped why='retiring: {GROUP}'"] * 2
    assert all(r["state"] is None for r in records.sent)


async def test_a_recalled_group_not_collected_yet_waits_outside_the_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A group the restart recalled whose collections have failed since: it keeps its
    memory (no decision) and the collected group's checkpoint is still written."""
    service, records, clock = await _service(tmp_path, monkeypatch)
    waiting = GroupState(group=OTHER, arrival_samples=((990.0, 40.0),), hold_factor=2.0)
    service.state = ScalerState(groups=(waiting,))
    await _tick(service, clock)
    carried = [r for r in records.sent if r["state"] is not None]
    assert [r["group"] for r in carried] == [GROUP]
    assert carried[0]["state"]["of_groups"] == [GROUP]
    assert service.state.get(OTHER) == waiting


async def test_a_group_the_collector_could_not_read_is_written_with_its_last_signals(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A collection that fails at a checkpoint's tick gives the group's last signals again,
    flagged stale: the policy holds on them and keeps its memory, and the checkpoint is
    written beside the repeat, not skipped for an interval."""
    service, records, clock = await _service(tmp_path, monkeypatch)
    last = make_signals(group=GROUP, collected_at=clock.now)
    await service.on_tick([GroupCollection(GROUP, last, 0)])
    clock.now += CHECKPOINT_EVERY_S
    repeat = dataclasses.replace(last, stale=True)
    await service.on_tick([GroupCollection(GROUP, repeat, 1, error="KafkaTimeoutError()")])
    carried = [r for r in records.sent if r["state"] is not None]
    assert [r["tick_at"] for r in carried] == [1000.0, 1000.0 + CHECKPOINT_EVERY_S]
    assert carried[-1]["signals"]["stale"] is True
    assert carried[-1]["state"]["fields"]["failed_collections"] == 1
    assert service.state.get(GROUP).last_signals == last

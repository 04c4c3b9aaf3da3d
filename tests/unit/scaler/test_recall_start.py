"""ScalerService.start: the policy's memory is rebuilt from the decision records first."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

import pytest
from aiokafka.errors import KafkaConnectionError

import scaler.service
from scaler.collector.collector import GroupTarget
from scaler.recall_reader import ReadBack
from scaler.service import ScalerService
from scaler.signals import ScalerState
from tests.unit.scaler.test_recall import BURSTY, _live
from tests.unit.scaler.test_retired_groups import Counted


async def _service(tmp_path: Path, **options: Any) -> ScalerService:
    (tmp_path / "models").mkdir()
    service = ScalerService("127.0.0.1:1", tmp_path / "models", Counted(0), **options)
    await service.collector.add_targets([GroupTarget("m", "interactive")])
    return service


async def test_the_state_is_rebuilt_for_the_groups_the_scaler_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    records, live = _live(40, idle_every_s=25.0)
    asked: dict[str, Any] = {}

    async def read_decisions(bootstrap: str, **kwargs: Any) -> ReadBack:
        asked.update(kwargs)
        return ReadBack(records, complete=True)

    monkeypatch.setattr(scaler.service, "read_decisions", read_decisions)
    monkeypatch.setattr(scaler.service.time, "time", lambda: 1000.0 + 5.0 * 41)
    service = await _service(tmp_path)
    with caplog.at_level(logging.INFO, logger="scaler.service"):
        await service._recall()
    # The half hour of memory and a quarter hour before it (`replay_span_s`).
    assert asked["since"] == 1000.0 + 5.0 * 41 - 2700.0
    assert asked["most"] == 1080  # two records an interval over that, one group
    assert service.recalled is not None and service.recalled.ticks == 40
    assert service.state.groups == (dataclasses.replace(live.get(BURSTY), last_signals=None),)
    # A group this process has not collected yet gets no decision: decided on its
    # predecessor's last signals, it would be set back to the count it had then. Its
    # memory waits for its first collection.
    decision, after = service.policy([], service.state, service.config, 1000.0 + 5.0 * 41)
    assert decision.groups == ()
    assert after == service.state
    assert "event=recalled read=" in caplog.text
    assert "dropped=inferbus.workers.m.batch" in caplog.text


async def test_a_read_that_fails_starts_without_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def read_decisions(bootstrap: str, **kwargs: Any) -> ReadBack:
        raise KafkaConnectionError("the broker went away")

    monkeypatch.setattr(scaler.service, "read_decisions", read_decisions)
    service = await _service(tmp_path)
    with caplog.at_level(logging.WARNING, logger="scaler.service"):
        await service._recall()
    assert "event=recall_failed" in caplog.text
    assert service.recalled is None
    assert service.state == ScalerState()


async def test_a_replay_that_fails_starts_without_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A record the policy fails on must not keep the scaler from starting."""
    records, _ = _live(5, idle_every_s=0.0)

    async def read_decisions(bootstrap: str, **kwargs: Any) -> ReadBack:
        return ReadBack(records, complete=True)

    def policy(*args: Any) -> Any:
        raise ZeroDivisionError("a defect in the policy")

    monkeypatch.setattr(scaler.service, "read_decisions", read_decisions)
    monkeypatch.setattr(scaler.service.time, "time", lambda: 1000.0 + 5.0 * 6)
    service = await _service(tmp_path)
    service.policy = policy
    with caplog.at_level(logging.WARNING, logger="scaler.service"):
        await service._recall()
    assert "event=recall_failed error=ZeroDivisionError" in caplog.text
    assert service.state == ScalerState()


async def test_no_read_when_turned_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def read_decisions(bootstrap: str, **kwargs: Any) -> ReadBack:
        raise AssertionError("read with recall turned off")

    monkeypatch.setattr(scaler.service, "read_decisions", read_decisions)
    service = await _service(tmp_path, recall_timeout_s=0.0)
    await service._recall()
    assert service.recalled is None

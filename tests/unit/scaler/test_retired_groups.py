"""A group whose model no longer wants it is dropped from the scaler once nothing is queued
and no worker is left, not before."""

from __future__ import annotations

from pathlib import Path

import pytest

from scaler.actuators.base import Actuator
from scaler.collector.collector import GroupCollection, GroupTarget
from scaler.service import ScalerService
from tests.unit.scaler.conftest import make_signals

GROUP = "inferbus.workers.m.interactive"


class Counted(Actuator):
    def __init__(self, replicas: int) -> None:
        self.replicas = replicas

    async def current(self, group: str) -> int:
        return self.replicas

    async def scale(self, group: str, replicas: int, reason: str) -> None:
        self.replicas = replicas

    async def close(self) -> None:
        pass


@pytest.mark.parametrize(
    ("lag", "replicas", "running", "stale", "dropped"),
    [
        pytest.param(0, 0, 0, False, True, id="drained-and-stopped"),
        pytest.param(2, 0, 0, False, False, id="requests-still-queued"),
        pytest.param(0, 1, 1, False, False, id="a-worker-still-registered"),
        pytest.param(0, 0, 1, False, False, id="the-actuator-still-runs-one"),
        pytest.param(0, 0, 0, True, False, id="stale-signals"),
    ],
)
async def test_a_retiring_group_is_dropped_only_when_done(
    tmp_path: Path, lag: int, replicas: int, running: int, stale: bool, dropped: bool
) -> None:
    service = ScalerService("127.0.0.1:1", tmp_path, Counted(running))
    await service.collector.add_targets([GroupTarget("m", "interactive")])
    signals = make_signals(lag=lag, replicas=replicas, ready_replicas=replicas, stale=stale)
    collection = GroupCollection(GROUP, signals, 0, retiring="model 'm' is no longer there")
    await service._drop_if_retired(collection)
    assert (GROUP not in service.collector.groups) is dropped

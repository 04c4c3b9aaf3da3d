"""A group whose model no longer wants it is dropped from the scaler once nothing is queued
and no worker is left, not before (what is queued with no worker left is answered first:
tests/integration/test_orphans.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from scaler.actuators.base import Actuator
from scaler.collector.collector import GroupCollection, GroupTarget
from scaler.decision import GroupDecision
from scaler.policy.retire import settle_retiring
from scaler.service import ScalerService
from scaler.signals import GroupState, ScalerState
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


class CrashLooping(Counted):
    """A group whose one worker keeps failing to start: none runs between tries, yet one
    is still wanted (the local actuator's restart backoff)."""

    def __init__(self) -> None:
        super().__init__(0)
        self.wanted = 1

    async def scale(self, group: str, replicas: int, reason: str) -> None:
        self.wanted = replicas


async def test_a_dropped_group_is_scaled_to_zero_so_nothing_restarts_it(tmp_path: Path) -> None:
    actuator = CrashLooping()
    service = ScalerService("127.0.0.1:1", tmp_path, actuator)
    await service.collector.add_targets([GroupTarget("m", "interactive")])
    signals = make_signals(lag=0, replicas=0, ready_replicas=0)
    await service._drop_if_retired(GroupCollection(GROUP, signals, 0, retiring="gone"))
    assert GROUP not in service.collector.groups
    assert actuator.wanted == 0


@pytest.mark.parametrize(
    ("lag", "replicas", "running", "stale", "dropped"),
    [
        pytest.param(0, 0, 0, False, True, id="drained-and-stopped"),
        pytest.param(2, 0, 0, False, False, id="queued-and-no-worker-answered-first"),
        pytest.param(0, 1, 1, False, False, id="a-worker-still-registered"),
        pytest.param(0, 0, 1, False, False, id="the-actuator-still-runs-one"),
        pytest.param(0, 0, 0, True, False, id="stale-signals"),
        pytest.param(None, None, 0, False, True, id="never-collected"),
    ],
)
async def test_a_retiring_group_is_dropped_only_when_no_worker_is_left(
    tmp_path: Path,
    lag: int | None,
    replicas: int | None,
    running: int,
    stale: bool,
    dropped: bool,
) -> None:
    service = ScalerService("127.0.0.1:1", tmp_path, Counted(running))
    await service.collector.add_targets([GroupTarget("m", "interactive")])
    signals = (
        None
        if replicas is None
        else make_signals(lag=lag, replicas=replicas, ready_replicas=replicas, stale=stale)
    )
    service.state = ScalerState(groups=(GroupState(group=GROUP),))
    collection = GroupCollection(GROUP, signals, 0, retiring="model 'm' is no longer there")
    await service._drop_if_retired(collection)
    assert (GROUP not in service.collector.groups) is dropped
    # A dropped group left in the policy's state was decided as stale ever after, and
    # given a replica of the budget.
    assert (service.state.get(GROUP).last_signals is None and not service.state.groups) is dropped


def _decision(desired: int) -> GroupDecision:
    return GroupDecision(
        group=GROUP, model="m", tier="interactive", current=2, desired=desired, diagnosis="steady"
    )


@pytest.mark.parametrize(
    ("wanted", "lag", "replicas", "desired", "says"),
    [
        pytest.param(4, 30, 2, 2, "2 worker(s) answer the 30 queued", id="never-grows"),
        pytest.param(0, 30, 2, 1, "answer the 30 queued", id="one-while-requests-wait"),
        pytest.param(1, 0, 2, 0, "nothing queued: its workers stop", id="drained"),
        pytest.param(1, 5, 0, 0, "the scaler answers its 5 queued request(s)", id="nobody-left"),
    ],
)
def test_a_retiring_group_s_workers_answer_what_is_queued_then_go(
    wanted: int, lag: int, replicas: int, desired: int, says: str
) -> None:
    signals = make_signals(lag=lag, replicas=replicas, ready_replicas=replicas)
    settled = settle_retiring(_decision(wanted), signals, "model 'm' is gone")
    assert settled.desired == desired and settled.standby == 0
    assert says in settled.reasons[-1].message
    assert settled.reasons[-1].message.startswith("model 'm' is gone: ")

"""A group whose model no longer wants it is dropped from the scaler once nothing is queued
and no worker is left, not before: what it holds with no worker left is answered first
(here with a fake sweep; against the broker in tests/integration/test_orphans.py)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from scaler.actuators.base import Actuator
from scaler.collector.collector import GroupCollection, GroupTarget
from scaler.decision import GroupDecision
from scaler.orphan_sweeps import OrphanSweeps
from scaler.policy.retire import settle_retiring
from scaler.registry import fold_all
from scaler.service import ScalerService
from scaler.signals import GroupState, ScalerState
from schemas.telemetry import InstanceRecord
from services.runtime.orphans import SweepCounts
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


class FakeSweep:
    """`answer_orphans` that answers `found` records the first time, nothing after."""

    def __init__(self, found: int) -> None:
        self.found = found
        self.calls: list[dict[str, Any]] = []
        self.release = asyncio.Event()
        self.release.set()

    async def __call__(self, bootstrap: str, publisher: Any, **kw: Any) -> SweepCounts:
        self.calls.append(kw)
        await self.release.wait()
        found, self.found = self.found, 0
        return SweepCounts(answered=found, dead_lettered=0)


def service_with(actuator: Actuator, sweep: FakeSweep, tmp_path: Path, **kw: Any) -> ScalerService:
    sweeps = OrphanSweeps("127.0.0.1:1", sweep=sweep)
    sweeps.bind(object())  # type: ignore[arg-type]
    return ScalerService("127.0.0.1:1", tmp_path, actuator, sweeps=sweeps, **kw)


async def started() -> None:
    """Let a sweep task the service created take its first steps."""
    for _ in range(3):
        await asyncio.sleep(0)


async def settle(service: ScalerService) -> None:
    """Let a sweep started by the service run to its end."""
    for _ in range(20):
        await asyncio.sleep(0)
        if not service.sweeps.running(GROUP):
            return


def retiring(signals: Any) -> GroupCollection:
    return GroupCollection(
        GROUP, signals, 0, retiring="model 'm' is gone", retired_answer="model_not_found"
    )


async def test_a_crash_looping_group_is_scaled_to_zero_before_its_queue_is_answered(
    tmp_path: Path,
) -> None:
    actuator, sweep = CrashLooping(), FakeSweep(found=3)
    sweep.release.clear()
    service = service_with(actuator, sweep, tmp_path)
    await service.collector.add_targets([GroupTarget("m", "interactive")])
    await service._drop_if_retired(retiring(make_signals(lag=3, replicas=0, ready_replicas=0)))
    assert actuator.wanted == 0, "no worker restarted under the sweep"
    await started()
    assert service.sweeps.running(GROUP) and GROUP in service.collector.groups
    assert sweep.calls[0]["topic"] == "inferbus.req.m.interactive"
    assert sweep.calls[0]["status"] == "model_not_found"
    sweep.release.set()
    await settle(service)
    await service._drop_if_retired(retiring(make_signals(lag=0, replicas=0, ready_replicas=0)))
    assert GROUP not in service.collector.groups


async def test_a_never_collected_group_is_swept_until_a_sweep_finds_nothing(
    tmp_path: Path,
) -> None:
    # Retired before its first collection (a leftover adopted at start): its lag is not
    # known, so only a sweep can tell it is empty.
    sweep = FakeSweep(found=4)
    service = service_with(Counted(0), sweep, tmp_path)
    await service.collector.add_targets([GroupTarget("m", "interactive")])
    for expected_calls in (1, 2):
        await service._drop_if_retired(retiring(None))
        await settle(service)
        assert GROUP in service.collector.groups and len(sweep.calls) == expected_calls
    await service._drop_if_retired(retiring(None))
    assert GROUP not in service.collector.groups, "dropped once a sweep found nothing"


async def test_a_worker_that_comes_back_stops_the_sweep(tmp_path: Path) -> None:
    sweep = FakeSweep(found=3)
    sweep.release.clear()
    service = service_with(Counted(0), sweep, tmp_path)
    await service.collector.add_targets([GroupTarget("m", "interactive")])
    await service._drop_if_retired(retiring(make_signals(lag=3, replicas=0, ready_replicas=0)))
    assert service.sweeps.running(GROUP)
    await service._drop_if_retired(retiring(make_signals(lag=3, replicas=1, ready_replicas=1)))
    assert not service.sweeps.running(GROUP) and GROUP in service.collector.groups


async def test_a_draining_worker_the_registry_knows_keeps_the_sweep_off(tmp_path: Path) -> None:
    # Never collected (no signals) and the actuator counts none, yet a worker is still
    # draining what it holds: a sweep beside it would answer those requests twice.
    sweep = FakeSweep(found=3)
    service = service_with(Counted(0), sweep, tmp_path)
    await service.collector.add_targets([GroupTarget("m", "interactive")])
    now = datetime.now(UTC)
    draining = InstanceRecord(
        instance_id="w1",
        model="m",
        tiers=["interactive"],
        group=GROUP,
        state="draining",
        started_at=now,
        updated_at=now,
        lease_s=6.0,
    )
    service.registry.table = fold_all([draining])
    await service._drop_if_retired(retiring(None))
    await started()
    assert sweep.calls == [] and GROUP in service.collector.groups


async def test_a_failed_collection_does_not_stop_a_sweep(tmp_path: Path) -> None:
    # It carries no retirement (the collection failed, the model may still be gone): only
    # a collection that succeeds without one says the model wants the group again.
    sweep = FakeSweep(found=3)
    sweep.release.clear()
    service = service_with(Counted(0), sweep, tmp_path)
    await service.collector.add_targets([GroupTarget("m", "interactive")])
    await service._drop_if_retired(retiring(make_signals(lag=3, replicas=0, ready_replicas=0)))
    await started()
    await service.on_tick([GroupCollection(GROUP, None, 1, error="TimeoutError()")])
    assert service.sweeps.running(GROUP)
    await service.on_tick([GroupCollection(GROUP, make_signals(lag=3), 0)])
    assert not service.sweeps.running(GROUP), "the model is back: the sweep stops"


async def test_a_dry_run_answers_nothing(tmp_path: Path) -> None:
    sweep = FakeSweep(found=3)
    service = service_with(Counted(0), sweep, tmp_path, act=False)
    await service.collector.add_targets([GroupTarget("m", "interactive")])
    await service._drop_if_retired(retiring(make_signals(lag=3, replicas=0, ready_replicas=0)))
    assert sweep.calls == [] and GROUP not in service.collector.groups


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
        pytest.param(None, None, 0, False, False, id="never-collected-swept-first"),
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
    sweep = FakeSweep(found=lag or 1)
    sweep.release.clear()
    service = service_with(Counted(running), sweep, tmp_path)
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
    await started()
    swept = not dropped and running == 0 and replicas in (0, None) and not stale
    assert bool(sweep.calls) is swept, "a sweep answers what no worker will"
    await service.sweeps.close()


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
        pytest.param(
            1,
            5,
            0,
            0,
            "its 5 queued request(s) get an error result from the scaler",
            id="nobody-left",
        ),
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

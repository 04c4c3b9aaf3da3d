"""Simulator membership model: incremental handover vs eager pause, and warm standby."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import pytest

from infra.assignment import balanced_assignment
from scaler.config import PolicyConfig
from scaler.decision import Decision, GroupDecision
from scaler.policy import POLICIES
from scaler.signals import GroupSignals, ScalerState
from scaler.sim.engine import simulate
from scaler.sim.group import GroupSim, Handover, Replica
from scaler.sim.params import ServiceModel, SimParams
from scaler.sim.workload import TierArrivals, Workload

PARAMS = SimParams(
    service=ServiceModel(a_ms=1, b_ms=0.01, per="token", max_batch_size=4, max_queue_delay_ms=1),
    time_to_ready_s=30,
    partitions=32,
    drain_s=30,
    initial_replicas=4,
)


def _arrivals(rate: float = 200.0, seconds: float = 40.0) -> TierArrivals:
    times = np.arange(0.0, seconds, 1 / rate)
    return TierArrivals(times, np.full(times.size, 10.0))


def _group(params: SimParams) -> GroupSim:
    g = GroupSim("g", "interactive", _arrivals(), params)
    g.start_with(4)
    return g


def _join_at(g: GroupSim, t: float) -> Handover | None:
    """One replica joins at `t`; returns the handover it caused (None under eager)."""
    g.advance(t)
    g.replicas.append(Replica(0.0, ready_at=t, free_at=t, consume_from=t))
    g.membership_changed(t)
    handover = g.handovers[-1] if g.handovers else None
    g.advance(1e9)
    return handover


@pytest.mark.parametrize(
    ("before", "after"),
    [
        pytest.param(4, 5, id="scale-out-4-to-5"),
        pytest.param(4, 8, id="scale-out-4-to-8"),
        pytest.param(8, 5, id="scale-in-8-to-5"),
    ],
)
def test_moved_partitions_are_those_the_live_assignment_moves(before: int, after: int) -> None:
    g = GroupSim("g", "interactive", _arrivals(), PARAMS)
    g.start_with(before)
    old = [r.member_id for r in g.replicas]
    if after > before:
        for _ in range(after - before):
            g.replicas.append(Replica(0.0, ready_at=5.0, free_at=5.0, consume_from=5.0))
    else:
        for r in g.replicas[after:]:
            r.gone_at = 5.0
    g.membership_changed(5.0)
    new = [r.member_id for r in g.active()]
    was = {p: m for m, owned in balanced_assignment(32, old).items() for p in owned}
    now = {p: m for m, owned in balanced_assignment(32, new).items() for p in owned}
    expected = sorted(p for p in range(32) if was[p] != now[p])
    assert np.flatnonzero(g.handovers[-1].moved).tolist() == expected
    # At least the share that must change owner, and not much more.
    least = round(32 * abs(after - before) / max(after, before))
    assert least <= len(expected) <= least + 32 // max(after, before)


def test_incremental_pauses_only_moved_partitions() -> None:
    g = _group(dataclasses.replace(PARAMS, pause_model="incremental", handover_pause_s=1.0))
    handover = _join_at(g, 20.0)
    assert handover is not None
    moved = handover.moved[g.partition_of]
    during = (g.times >= 20.0) & (g.times < 20.9)
    e2e = g.end_t - g.times
    # Moved partitions' requests wait for the handover; the others are served as before.
    assert np.all(g.end_t[during & moved] >= 21.0)
    assert np.all(e2e[during & ~moved] < 0.1)
    assert 0 < np.count_nonzero(during & moved) < np.count_nonzero(during)


def test_a_leaver_keeps_its_partitions_until_its_batch_in_flight_is_done() -> None:
    g = _group(dataclasses.replace(PARAMS, pause_model="incremental", handover_pause_s=1.0))
    g.advance(20.0)
    leaver = g.replicas[0]
    owned = balanced_assignment(32, [r.member_id for r in g.replicas])[leaver.member_id]
    leaver.free_at = 23.0  # a long batch in flight
    leaver.leaving, leaver.gone_at = True, 23.0
    g.membership_changed(20.0)
    ends = {h.end_s for h in g.handovers}
    moved = np.array([h.moved for h in g.handovers]).any(axis=0)
    g.advance(1e9)
    assert ends == {21.0, 24.0}
    theirs = np.isin(g.partition_of, owned)
    others = moved[g.partition_of] & ~theirs
    during = (g.times >= 20.0) & (g.times < 23.9)
    # Nobody serves the leaver's partitions before it is done and the handover is over;
    # the other moved partitions wait for the handover only.
    assert np.all(g.end_t[during & theirs] >= 24.0)
    assert np.all(g.end_t[during & others] >= 21.0)
    assert np.any(g.end_t[during & others] < 24.0)


def test_eager_pauses_the_whole_group() -> None:
    g = _group(dataclasses.replace(PARAMS, pause_model="eager", rebalance_pause_s=1.0))
    assert _join_at(g, 20.0) is None
    during = (g.times >= 20.0) & (g.times < 20.9)
    assert np.all(g.end_t[during] >= 21.0)


def _scripted(schedule: Sequence[tuple[float, int, int]]) -> object:
    """A policy that asks (desired, standby) from the last schedule entry at or before now."""

    def policy(
        signals: Sequence[GroupSignals], state: ScalerState, config: PolicyConfig, now: float
    ) -> tuple[Decision, ScalerState]:
        _, desired, standby = [e for e in schedule if e[0] <= now][-1]
        groups = tuple(
            GroupDecision(
                group=s.group,
                model=s.model,
                tier=s.tier,
                current=s.replicas,
                desired=desired,
                diagnosis="steady",
                standby=standby,
                current_standby=s.standby_replicas or 0,
            )
            for s in signals
        )
        return Decision(policy="scripted", at=now, groups=groups), state

    return policy


def _run_scripted(
    monkeypatch: pytest.MonkeyPatch, schedule: Sequence[tuple[float, int, int]], standby: bool
):
    monkeypatch.setitem(POLICIES, "scripted", _scripted(schedule))  # type: ignore[arg-type]
    arrivals = _arrivals(rate=50.0, seconds=150.0)
    w = Workload("w", "test", 150.0, {"interactive": arrivals})
    params = dataclasses.replace(PARAMS, initial_replicas=1, standby=standby, drain_s=0.0)
    return simulate(w, params, "scripted", PolicyConfig())


def test_standby_consumes_within_a_handover(monkeypatch: pytest.MonkeyPatch) -> None:
    # 1 consumer + 2 standby from t=5 (warm at 35); at t=60 ask for 3 consumers.
    run = _run_scripted(monkeypatch, [(0, 1, 0), (5, 1, 2), (60, 3, 0)], standby=True)
    ready = {t.t: t.ready for t in run.ticks}
    standby = {t.t: t.standby for t in run.ticks}
    assert standby[40.0] == 2 and ready[40.0] == 1
    assert ready[65.0] == 3  # promoted at 60, consuming after the 1 s handover
    assert standby[65.0] == 0
    # Three replicas for 145 s, two of them from t=5: standby costs like any replica.
    assert run.groups[0].replica_seconds == pytest.approx(150 + 2 * 145, rel=0.01)


def test_without_standby_the_same_ask_is_a_cold_start(monkeypatch: pytest.MonkeyPatch) -> None:
    run = _run_scripted(monkeypatch, [(0, 1, 0), (60, 3, 0)], standby=False)
    ready = {t.t: t.ready for t in run.ticks}
    assert ready[85.0] == 1 and ready[95.0] == 3


def test_surplus_consumer_becomes_standby(monkeypatch: pytest.MonkeyPatch) -> None:
    run = _run_scripted(monkeypatch, [(0, 3, 0), (40, 1, 2), (80, 3, 0)], standby=True)
    by_t = {t.t: (t.ready, t.standby) for t in run.ticks}
    assert by_t[45.0] == (1, 2)
    assert by_t[85.0] == (3, 0)
    # Nothing was started after t=0 beyond the first two: demotion kept them warm.
    assert len(run.groups[0].ready_times) == 2


def test_the_default_handover_is_the_live_one() -> None:
    """Live (`inferbus bench scale-step`), a moved partition is read by its new owner within
    0.04-0.15 s of the change, 0.5 s at worst: the default pause is 0.1 s, not the 1 s it was."""
    g = _group(dataclasses.replace(PARAMS, pause_model="incremental"))
    assert PARAMS.handover_pause_s == SimParams().handover_pause_s == 0.1
    handover = _join_at(g, 20.0)
    assert handover is not None and handover.end_s - handover.start_s == pytest.approx(0.1)
    moved = handover.moved[g.partition_of]
    during = (g.times >= 20.0) & (g.times < 20.05)
    assert (during & moved).any(), "no request of a moved partition in the window"
    assert np.all(g.end_t[during & moved] >= 20.1)
    assert np.all(g.end_t[during & moved] - g.times[during & moved] < 0.2)

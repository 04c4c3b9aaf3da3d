"""After the load needed the group's cap: the scale-down waits `cap_hold_s` (HPA's window)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from scaler.config import PolicyConfig
from scaler.policy import decide
from scaler.policy.bursts import remember
from scaler.policy.cap_hold import CapHold, cap_hold
from scaler.policy.plan import Plan
from scaler.policy.scale_down import stabilize_slo
from scaler.signals import GroupState, ScalerState
from scaler.snapshot import load_snapshot
from tests.unit.scaler.conftest import FakeClock, make_signals

EXAMPLE = Path(__file__).parents[3] / "scaler" / "examples" / "at_the_cap.json"

NOW = 1000.0


def _plan(
    loads: list[tuple[float, float]],
    *,
    partitions: int = 16,
    max_replicas: int | None = None,
    desired: int = 4,
) -> Plan:
    """A group of 16 at `NOW` whose remembered loads (busy replicas' worth) are `loads`."""
    s = make_signals(
        replicas=16,
        ready_replicas=16,
        partitions=partitions,
        max_replicas=max_replicas,
        collected_at=NOW,
    )
    state = GroupState(group=s.group, load_samples=tuple(loads), observed_since=0.0)
    return Plan(signals=s, state=state, desired=desired, diagnosis="over_provisioned")


@pytest.mark.parametrize(
    ("peak", "peak_ago_s", "max_replicas", "quiet_s", "hold_s", "held"),
    [
        # 16 partitions at the 0.7 target: a load of 11.2 busy replicas needs them all.
        pytest.param(12.0, 100.0, None, 0.0, 300.0, True, id="needed-the-cap-100-s-ago"),
        pytest.param(11.0, 100.0, None, 0.0, 300.0, False, id="under-the-cap-at-the-target"),
        pytest.param(12.0, 301.0, None, 0.0, 300.0, False, id="longer-ago-than-the-hold"),
        # max_replicas 8 is the cap: 5.6 busy replicas need it.
        pytest.param(6.0, 50.0, 8, 0.0, 300.0, True, id="max-replicas-is-the-cap"),
        # The memory saw the load stay away 400 s: a 300 s hold would buy nothing.
        pytest.param(12.0, 100.0, None, 400.0, 300.0, False, id="longer-quiet-remembered"),
        pytest.param(12.0, 100.0, None, 200.0, 300.0, True, id="shorter-quiet-remembered"),
        pytest.param(12.0, 100.0, None, 0.0, 0.0, False, id="turned-off"),
    ],
)
def test_cap_hold_after_a_load_that_needed_the_cap(
    peak: float,
    peak_ago_s: float,
    max_replicas: int | None,
    quiet_s: float,
    hold_s: float,
    held: bool,
) -> None:
    loads = [(NOW - 600.0, 1.0), (NOW - peak_ago_s, peak), (NOW - 5.0, 1.0)]
    memory = remember(loads, 0.25)
    assert memory is not None
    memory = dataclasses.replace(memory, quiet_before_s=quiet_s)
    plan = _plan(loads, max_replicas=max_replicas)
    found = cap_hold(plan, PolicyConfig(cap_hold_s=hold_s), memory).cap_hold
    assert (found is not None) is held
    if found is not None:
        assert (found.ago_s, found.hold_s, found.load) == (peak_ago_s, hold_s, peak)


def test_a_cap_hold_keeps_the_highest_recommendation_over_its_window() -> None:
    plan = dataclasses.replace(
        _plan([(NOW - 200.0, 12.0)]),
        state=GroupState(group="g", recommendations=((NOW - 200.0, 16),), observed_since=0.0),
    )
    # Without it the 40 s hold (the reaction time) has long let go of the 16.
    assert stabilize_slo(plan, PolicyConfig(), NOW).desired == 4
    held = CapHold(hold_s=300.0, cap=16, load=12.0, target=0.7, ago_s=200.0, longest_quiet_s=0.0)
    plan = stabilize_slo(dataclasses.replace(plan, cap_hold=held), PolicyConfig(), NOW)
    assert plan.desired == 16
    reason = plan.reasons[-1]
    assert reason.code == "scale_down_stabilized"
    assert "200 s ago the load needed the cap of 16 (12.0 busy replicas' worth" in reason.message
    assert reason.numbers["hold_s"] == 300.0


@pytest.mark.parametrize(
    ("loads", "quiet_s"),
    [
        pytest.param([10.0] * 6 + [0.1] * 8 + [10.0] * 6 + [0.1] * 2, 0.0, id="starts-in-a-burst"),
        # 20 samples 5 s apart under the gap line: at least 95 s of quiet before the burst.
        pytest.param([0.1] * 20 + [10.0] * 6 + [0.1] * 2, 95.0, id="quiet-then-a-burst"),
        pytest.param([0.1] * 20, 0.0, id="no-burst-yet"),
    ],
)
def test_the_quiet_before_the_first_burst_is_remembered(loads: list[float], quiet_s: float) -> None:
    memory = remember([(5.0 * i, v) for i, v in enumerate(loads)], 0.25)
    if memory is None:
        assert quiet_s == 0.0
        return
    assert memory.quiet_before_s == pytest.approx(quiet_s)


def _periodic(quiet_ticks: int) -> list[float]:
    """3600/s (12 busy of 16 partitions at 300/s) for 60 s every 300 s, 300/s between,
    after `quiet_ticks` ticks of 300/s."""
    return [300.0] * quiet_ticks + ([3600.0] * 12 + [300.0] * 48) * 3


@pytest.mark.parametrize(
    ("quiet_ticks", "held"),
    [
        # A job every five minutes at the cap: the 240 s gaps stay at the cap.
        pytest.param(0, True, id="bursts-from-the-start"),
        # Ten quiet minutes before the first: the load is known to stay away longer.
        pytest.param(120, False, id="ten-quiet-minutes-first"),
    ],
)
def test_a_group_at_its_cap_holds_through_gaps_shorter_than_the_hold(
    clock: FakeClock, quiet_ticks: int, held: bool
) -> None:
    config = PolicyConfig(initial_spare_replicas=1.0)
    state, replicas, lows = ScalerState(), 16, []
    for i, lam in enumerate(_periodic(quiet_ticks)):
        now = clock.tick(5.0)
        s = make_signals(
            replicas=replicas,
            ready_replicas=replicas,
            partitions=16,
            arrival_rps=lam,
            utilization=min(1.0, lam / (300.0 * replicas)),
            lag=0,
            queue_p99_ms=30.0,
            oldest_age_ms=10.0,
            collected_at=now,
        )
        decision, state = decide([s], state, config, now)
        group = decision.groups[0]
        replicas = group.desired
        if i >= quiet_ticks + 12 and lam < 1000:
            lows.append(group)
    assert (min(g.desired for g in lows) == 16) is held
    said = any("needed the cap of 16" in r.message for g in lows for r in g.reasons)
    assert said is held


@pytest.mark.parametrize(("hold_s", "desired"), [(300.0, 12), (0.0, 2)])
def test_the_example_snapshot_says_why_it_keeps_the_cap(hold_s: float, desired: int) -> None:
    snap = load_snapshot(EXAMPLE)
    decision, _ = decide(snap.signals, snap.state, PolicyConfig(cap_hold_s=hold_s), snap.now)
    (group,) = decision.groups
    assert group.desired == desired
    said = "125 s ago the load needed the cap of 12 (12.0 busy replicas' worth" in group.line()
    assert said is (hold_s > 0), group.line()

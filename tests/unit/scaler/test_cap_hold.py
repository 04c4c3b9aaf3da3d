"""After the load needed the group's cap, the group keeps it `cap_hold_s` (HPA's window)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from scaler.config import PolicyConfig
from scaler.policy import decide
from scaler.policy.bursts import BurstMemory, remember
from scaler.policy.cap_hold import cap_hold
from scaler.policy.guards import group_cap
from scaler.policy.plan import CapHold, Plan
from scaler.policy.scale_down import stabilize_slo
from scaler.signals import GroupState, ScalerState, SignalsError
from scaler.snapshot import load_snapshot
from tests.unit.scaler.conftest import FakeClock, make_signals

EXAMPLE = Path(__file__).parents[3] / "scaler" / "examples" / "at_the_cap.json"

NOW = 1000.0
QUIET = [(NOW - 600.0, 1.0), (NOW - 5.0, 1.0)]
"""Loads around the peak each case adds: 1 busy replica 600 s and 5 s ago."""


def _plan(
    loads: list[tuple[float, float]],
    *,
    partitions: int = 16,
    max_replicas: int | None = None,
    tick_rps: float | None = 300.0,
) -> Plan:
    """A group of 16 at `NOW` (300/s a replica) that remembers `loads` and sees `tick_rps`."""
    s = make_signals(
        replicas=16,
        ready_replicas=16,
        partitions=partitions,
        max_replicas=max_replicas,
        arrival_rps=tick_rps,
        collected_at=NOW,
    )
    state = GroupState(group=s.group, load_samples=tuple(loads), observed_since=0.0)
    return Plan(signals=s, state=state, desired=4, diagnosis="over_provisioned")


def _memory(
    loads: list[tuple[float, float]], gaps_s: tuple[float, ...], quiet_s: float
) -> BurstMemory:
    memory = remember(sorted(loads), 0.25)
    if memory is None:  # a flat load: no burst memory
        return None
    return dataclasses.replace(memory, gaps_s=gaps_s, quiet_before_s=quiet_s)


@pytest.mark.parametrize(
    ("peak", "ago_s", "tick_rps", "max_replicas", "gaps_s", "quiet_s", "held_ago_s"),
    [
        # 16 partitions at the 0.7 target: a load of 11.2 busy replicas needs them all.
        pytest.param(12.0, 100.0, 300.0, None, (), 0.0, 100.0, id="needed-the-cap-100-s-ago"),
        pytest.param(11.2, 100.0, 300.0, None, (), 0.0, 100.0, id="at-the-line"),
        pytest.param(11.1, 100.0, 300.0, None, (), 0.0, None, id="under-the-line"),
        pytest.param(12.0, 300.0, 300.0, None, (), 0.0, None, id="as-old-as-the-hold"),
        # 12 x 300/s arriving now: this tick's load needs the cap.
        pytest.param(1.0, 100.0, 3600.0, None, (), 0.0, 0.0, id="needed-on-this-tick"),
        # Without a rate this tick adds no load (the last remembered one is not "now").
        pytest.param(1.0, 100.0, None, None, (), 0.0, None, id="no-rate-this-tick"),
        # max_replicas 8 is the cap: 5.6 busy replicas need it; 20 leaves the 16 partitions.
        pytest.param(6.0, 50.0, 300.0, 8, (), 0.0, 50.0, id="max-replicas-under-partitions"),
        pytest.param(12.0, 50.0, 300.0, 20, (), 0.0, 50.0, id="max-replicas-over-partitions"),
        # A gap at least as long as the hold was seen: paying for it would buy nothing.
        pytest.param(12.0, 100.0, 300.0, None, (120.0, 300.0), 0.0, None, id="a-long-gap"),
        pytest.param(12.0, 100.0, 300.0, None, (), 300.0, None, id="long-quiet-first"),
        pytest.param(12.0, 100.0, 300.0, None, (240.0,), 200.0, 100.0, id="shorter-gaps"),
    ],
)
def test_cap_hold_after_a_load_that_needed_the_cap(
    peak: float,
    ago_s: float,
    tick_rps: float | None,
    max_replicas: int | None,
    gaps_s: tuple[float, ...],
    quiet_s: float,
    held_ago_s: float | None,
) -> None:
    loads = sorted([*QUIET, (NOW - ago_s, peak)])
    plan = _plan(loads, max_replicas=max_replicas, tick_rps=tick_rps)
    found = cap_hold(plan, PolicyConfig(), _memory(loads, gaps_s, quiet_s)).cap_hold
    assert (found is not None) is (held_ago_s is not None)
    if found is not None:
        assert (found.ago_s, found.hold_s) == (held_ago_s, 300.0)


@pytest.mark.parametrize("memory", [None, "quiet"], ids=["no-memory", "memory"])
def test_cap_hold_without_a_burst_memory_or_when_turned_off(memory: str | None) -> None:
    loads = sorted([*QUIET, (NOW - 100.0, 12.0)])
    remembered = _memory(loads, (), 0.0) if memory else None
    assert cap_hold(_plan(loads), PolicyConfig(), remembered).cap_hold is not None
    off = PolicyConfig(cap_hold_s=0.0)
    assert cap_hold(_plan(loads), off, remembered).cap_hold is None


def test_cap_hold_is_at_most_the_burst_memory() -> None:
    with pytest.raises(SignalsError, match="cap_hold_s must be <= burst_memory_s"):
        PolicyConfig(cap_hold_s=600.0, burst_memory_s=300.0)


@pytest.mark.parametrize(
    ("partitions", "max_replicas", "cap"),
    [(16, None, 16), (16, 8, 8), (16, 20, 16), (16, 0, 0)],
)
def test_group_cap(partitions: int, max_replicas: int | None, cap: int) -> None:
    s = make_signals(
        partitions=partitions, max_replicas=max_replicas, min_replicas=0, warm_replicas=0
    )
    assert group_cap(s) == cap


HELD = CapHold(hold_s=300.0, cap=16, line=11.2, load=12.0, ago_s=200.0, longest_quiet_s=0.0)


@pytest.mark.parametrize(
    ("release_to_floor", "desired"),
    [
        # No recommendation is remembered (a snapshot, a restart): the cap hold keeps the cap.
        pytest.param(False, 16, id="keeps-the-cap"),
        # In a gap between slow-rising bursts the floor is the whole hold.
        pytest.param(True, 4, id="the-floor-is-the-hold"),
    ],
)
def test_a_cap_hold_keeps_the_cap(release_to_floor: bool, desired: int) -> None:
    plan = dataclasses.replace(
        _plan([(NOW - 200.0, 12.0)]), release_to_floor=release_to_floor, burst_floor=4
    )
    # Without it the 40 s hold (the reaction time) keeps nothing from 200 s ago.
    assert stabilize_slo(plan, PolicyConfig(), NOW).desired == 4
    plan = stabilize_slo(dataclasses.replace(plan, cap_hold=HELD), PolicyConfig(), NOW)
    assert plan.desired == desired
    if desired == 16:
        reason = plan.reasons[-1]
        assert reason.code == "scale_down_stabilized"
        assert reason.message == (
            "scale-down to 4 held at 16 (the cap 16, kept 300 s after the load needed it: "
            "12.0 busy replicas' worth, >= 11.2, 200 s ago; no quiet stretch is remembered yet)"
        )
        assert (reason.numbers["cap"], reason.numbers["cap_needed_ago_s"]) == (16, 200.0)


@pytest.mark.parametrize(
    ("loads", "quiet_s"),
    [
        pytest.param([10.0] * 6 + [0.1] * 8 + [10.0] * 6 + [0.1] * 2, 0.0, id="starts-in-a-burst"),
        # 20 samples 5 s apart under the gap line: 95 s from the first to the last.
        pytest.param([0.1] * 20 + [10.0] * 6 + [0.1] * 2, 95.0, id="quiet-then-a-burst"),
        # A burst's tail in the band (between the gap line, 2.6, and the burst line, 5.05) is
        # not quiet; small bursts in the band after the quiet began count, as in a gap.
        pytest.param([4.0] * 10 + [0.1] * 10 + [10.0] * 6 + [0.1] * 2, 45.0, id="band-first"),
        pytest.param([0.1] * 10 + [4.0] * 2 + [0.1] * 8 + [10.0] * 6, 95.0, id="band-blip"),
        pytest.param([0.1] * 10 + [10.0] * 3, 45.0, id="a-burst-going-on"),
    ],
)
def test_the_quiet_before_the_first_burst_is_remembered(loads: list[float], quiet_s: float) -> None:
    memory = remember([(5.0 * i, v) for i, v in enumerate(loads)], 0.25)
    assert memory is not None
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
    said = any("(the cap 16, kept 300 s" in r.message for g in lows for r in g.reasons)
    assert said is held


@pytest.mark.parametrize(("hold_s", "desired"), [(300.0, 12), (0.0, 2)])
def test_the_example_snapshot_says_why_it_keeps_the_cap(hold_s: float, desired: int) -> None:
    snap = load_snapshot(EXAMPLE)
    decision, _ = decide(snap.signals, snap.state, PolicyConfig(cap_hold_s=hold_s), snap.now)
    (group,) = decision.groups
    assert group.desired == desired
    said = "12.0 busy replicas' worth, >= 8.4, 125 s ago" in group.line()
    assert said is (hold_s > 0), group.line()

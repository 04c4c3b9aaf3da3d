"""Burst memory and burst-aware sizing: hold through gaps, meet a rise, then standby."""

from __future__ import annotations

import dataclasses

import pytest

from scaler.policy import decide
from scaler.policy.bursts import remember
from scaler.signals import GroupDecision, GroupSignals, PolicyConfig, ScalerState
from tests.unit.scaler.conftest import FakeClock, make_signals


def _on_off(cycles: int, burst_s: int, gap_s: int, peak: float, step_s: int = 5) -> list[float]:
    loads: list[float] = []
    for _ in range(cycles):
        loads += [peak] * (burst_s // step_s) + [0.1] * (gap_s // step_s)
    return loads


def _samples(loads: list[float], step_s: float = 5.0) -> list[tuple[float, float]]:
    return [(i * step_s, v) for i, v in enumerate(loads)]


@pytest.mark.parametrize(
    ("loads", "bursts", "gaps"),
    [
        pytest.param(_on_off(4, 30, 40, 10.0), 4, [40.0, 40.0, 40.0], id="on-off"),
        pytest.param([5.0, 5.3, 4.8, 5.1, 4.9, 5.2] * 10, 0, [], id="steady-wobble-no-bursts"),
        pytest.param([0.1] * 5 + [10.0] * 6 + [0.1] * 5, 1, [], id="one-burst-no-gap-after"),
    ],
)
def test_remember_splits_bursts_and_gaps(
    loads: list[float], bursts: int, gaps: list[float]
) -> None:
    memory = remember(_samples(loads), 0.25)
    if bursts == 0:
        # The trigger sees small crossings in a wobble; they are not bursts of this load.
        assert memory is None or not memory.bursty(2, 2.5)
        return
    assert memory is not None
    assert len(memory.bursts) == bursts
    assert list(memory.gaps_s) == pytest.approx(gaps, abs=5.0)
    assert memory.median_rise_s() <= 5.0


def test_schmitt_trigger_ignores_wobble_around_the_gap_line() -> None:
    # Base 1, peaks 10: the gap line is at 3.25, the burst line at 5.5; 4 -> 2.8 -> 4 is neither.
    loads = [*_on_off(3, 30, 60, 10.0), 4.0, 2.8, 4.0, 2.8, 4.0]
    memory = remember(_samples([max(v, 1.0) for v in loads]), 0.25)
    assert memory is not None and len(memory.bursts) == 3


def test_sawtooth_base_counts_as_gap() -> None:
    # Falls back to a third of its peak, never to zero: still bursts and gaps.
    loads = ([4.0] * 8 + [4.0 + i for i in range(9)]) * 4
    memory = remember(_samples(loads), 0.25)
    assert memory is not None and len(memory.onsets()) >= 3
    assert memory.bursty(2, 2.5)


def _tick(load_rps: float, replicas: int, **extra: object) -> GroupSignals:
    return make_signals(
        replicas=replicas,
        ready_replicas=replicas,
        arrival_rps=load_rps,
        utilization=min(1.0, load_rps / (300.0 * max(replicas, 1))),
        lag=0,
        queue_p99_ms=30.0,
        oldest_age_ms=10.0,
        partitions=64,
        **extra,
    )


def _drive(
    clock: FakeClock,
    rps: list[float],
    config: PolicyConfig,
    standby: bool = False,
) -> list[tuple[float, GroupDecision]]:
    """Tick every 5 s through `rps`, applying each decision at once (replicas ready at once)."""
    state, replicas, spare, out = ScalerState(), 4, 0, []
    for lam in rps:
        now = clock.tick(5.0)
        extra: dict[str, object] = {}
        if standby:
            extra = {"standby_replicas": spare, "standby_ready_replicas": spare}
        s = dataclasses.replace(_tick(lam, replicas, **extra), collected_at=now)
        decision, state = decide([s], state, config, now)
        g = decision.groups[0]
        replicas, spare = g.desired, g.standby
        out.append((now, g))
    return out


BURSTY = [0.0 if i % 14 >= 6 else 3000.0 for i in range(14 * 8)]
"""Bursts of 3000/s for 30 s, then 40 s idle, 8 times (ticks of 5 s)."""


def test_hold_through_short_gaps(clock: FakeClock) -> None:
    seen = _drive(clock, BURSTY, PolicyConfig(initial_spare_replicas=1.0))
    late = [g for t, g in seen if t > 14 * 5 * 4]
    gaps = [g for g in late if g.current and "burst_hold" in {r.code for r in g.reasons}]
    assert gaps, "no hold once the bursts are remembered"
    # 3000/s at 300/s is 10 busy + 1 spare: the whole burst size waits through the gap.
    assert min(g.desired for g in late) >= 11
    reason = next(r for r in gaps[-1].reasons if r.code == "burst_hold")
    assert reason.numbers["median_gap_s"] <= 4 * reason.numbers["keep_cost_s"]


def test_long_gaps_are_not_held(clock: FakeClock) -> None:
    # Gaps of 10 min: keeping 11 replicas that long costs more than starting them again.
    rps = ([3000.0] * 6 + [0.0] * 120) * 3
    seen = _drive(clock, rps, PolicyConfig(initial_spare_replicas=1.0))
    assert all("burst_hold" not in {r.code for r in g.reasons} for _, g in seen)
    assert min(g.desired for t, g in seen if t > 700) <= 2


def test_gap_longer_than_remembered_moves_capacity_to_standby(clock: FakeClock) -> None:
    rps = BURSTY + [0.0] * 40
    seen = _drive(clock, rps, PolicyConfig(initial_spare_replicas=1.0), standby=True)
    end_of_bursts = len(BURSTY) * 5.0
    stages = [
        (t - end_of_bursts, g.desired, g.standby, {r.code for r in g.reasons})
        for t, g in seen
        if t > end_of_bursts
    ]
    standby = [s for s in stages if s[2] > 0]
    assert standby, stages
    assert all("burst_standby" in s[3] and s[1] + s[2] >= 11 for s in standby)
    assert standby[0][1] < 11  # the consumers went down; the capacity waits as standby
    # After one more keep cost (41 s) in standby, the standby is released too.
    assert stages[-1][2] == 0


def test_without_standby_support_no_standby_is_asked(clock: FakeClock) -> None:
    seen = _drive(clock, BURSTY + [0.0] * 40, PolicyConfig(initial_spare_replicas=1.0))
    assert all(g.standby == 0 for _, g in seen)


def test_rise_like_the_remembered_ones_is_met_at_its_peak(clock: FakeClock) -> None:
    # Ramps 600 -> 3000/s over 60 s, then 60 s at 600/s; the 5th ramp is met early.
    ramp = [600.0 + 200.0 * i for i in range(13)]
    rps = (ramp + [600.0] * 12) * 5
    seen = _drive(clock, rps, PolicyConfig(initial_spare_replicas=1.0))
    rises = [(t, g) for t, g in seen if "burst_rise" in {r.code for r in g.reasons}]
    assert rises
    _t, g = rises[-1]
    assert g.desired >= 10  # the remembered ramps peaked near 3000/s = 10 busy

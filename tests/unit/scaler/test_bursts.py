"""Burst memory and burst-aware sizing: hold through gaps, meet a rise, then standby."""

from __future__ import annotations

import dataclasses

import pytest

from scaler.config import PolicyConfig
from scaler.decision import GroupDecision
from scaler.policy import decide
from scaler.policy.bursts import Burst, BurstMemory, remember
from scaler.policy.hold import burst_due, release_to_floor
from scaler.policy.plan import Plan
from scaler.policy.scale_down import stabilize_slo
from scaler.signals import GroupSignals, GroupState, ScalerState
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


def _tick(load_rps: float, replicas: int, partitions: int = 64, **extra: object) -> GroupSignals:
    return make_signals(
        replicas=replicas,
        ready_replicas=replicas,
        arrival_rps=load_rps,
        utilization=min(1.0, load_rps / (300.0 * max(replicas, 1))),
        lag=0,
        # No request, no queue to measure (the collector and the simulator report none).
        queue_p99_ms=30.0 if load_rps > 0 else None,
        oldest_age_ms=10.0,
        partitions=partitions,
        **extra,
    )


def _drive(
    clock: FakeClock,
    rps: list[float],
    config: PolicyConfig,
    standby: bool = False,
    partitions: int = 64,
) -> list[tuple[float, GroupDecision]]:
    """Tick every 5 s through `rps`, applying each decision at once (replicas ready at once)."""
    state, replicas, spare, out = ScalerState(), 4, 0, []
    for lam in rps:
        now = clock.tick(5.0)
        extra: dict[str, object] = {}
        if standby:
            extra = {"standby_replicas": spare, "standby_ready_replicas": spare}
        s = dataclasses.replace(_tick(lam, replicas, partitions, **extra), collected_at=now)
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


@pytest.mark.parametrize(
    ("partitions", "floor", "said"),
    [
        pytest.param(64, 13, False, id="even-enough-shares"),
        pytest.param(16, 16, True, id="thirteen-of-sixteen-leave-three-with-two"),
    ],
)
def test_a_burst_floor_leaves_no_consumer_over_capacity(
    clock: FakeClock, partitions: int, floor: int, said: bool
) -> None:
    """A 10-busy burst kept as 13 consumers (with the spare) of 16 partitions: three own 2,
    an eighth of the burst each, 1.25x what one serves; the floor goes to 16. Of 64
    partitions the busiest owns 5 (0.78x): it stays."""
    seen = _drive(clock, BURSTY, PolicyConfig(initial_spare_replicas=1.0), partitions=partitions)
    held = [g for t, g in seen if t > 14 * 5 * 4 and "burst_hold" in {r.code for r in g.reasons}]
    assert held, "no hold once the bursts are remembered"
    reason = next(r for r in held[-1].reasons if r.code == "burst_hold")
    assert reason.numbers["floor_by_mean"] == 13
    assert reason.numbers["floor"] == floor
    assert ("13 would leave one of them 2 of the 16" in reason.message) is said, reason.message


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


@pytest.mark.parametrize(
    ("peaks", "quantile", "expected"),
    [
        pytest.param([], 0.75, 0.0, id="none"),
        pytest.param([5.0], 0.75, 5.0, id="one"),
        pytest.param([15.0, 19.0, 17.0, 16.0], 0.75, 19.0, id="four-p75-is-the-highest"),
        pytest.param([float(v) for v in range(20, 27)], 0.75, 25.0, id="seven-p75-is-the-6th"),
        pytest.param([float(v) for v in range(20, 39)], 0.75, 34.0, id="nineteen-p75-is-15th"),
        pytest.param([float(v) for v in range(20, 39)], 0.5, 29.0, id="nineteen-median"),
    ],
)
def test_peak_quantile_at_the_next_burst_rank(
    peaks: list[float], quantile: float, expected: float
) -> None:
    # Bursts of 20 s from a gap of 30 s at each peak; base 0.1.
    loads: list[float] = [0.1] * 6
    for p in peaks:
        loads += [p] * 4 + [0.1] * 6
    memory = remember(_samples(loads), 0.25)
    if not peaks:
        assert memory is None
        return
    assert memory is not None and len(memory.onsets()) == len(peaks)
    assert memory.peak(quantile) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("rise", "lead", "expected"),
    [
        # A burst at its peak within one tick: the lead is the peak.
        pytest.param([10.0] * 6, 31.0, 10.0, id="fast-burst-lead-is-peak"),
        # A ramp 4 -> 12 over 90 s: first seen above the gap line (5.9) at 25 s; 31 s later
        # (the keep cost) it is at 8.9, not 12.
        pytest.param([4.0 + 8.0 * t / 90 for t in range(0, 95, 5)], 31.0, 8.9, id="slow-ramp"),
        pytest.param([4.0 + 8.0 * t / 90 for t in range(0, 95, 5)], 1e9, 12.0, id="no-lead"),
    ],
)
def test_lead_load_is_what_the_burst_needs_before_a_start_serves(
    rise: list[float], lead: float, expected: float
) -> None:
    loads = ([4.0] * 8 + rise) * 3 + [4.0] * 8
    memory = remember(_samples(loads), 0.25, lead_s=lead)
    assert memory is not None and len(memory.onsets()) >= 2
    assert memory.lead_peak(0.5) == pytest.approx(expected, abs=0.3)


def test_one_outsized_burst_does_not_erase_the_others() -> None:
    # Bursts at 10 busy every 70 s, then one at 30: with the top at the highest sample the
    # burst line (base + half the range) rose above 10 and only the big one was a burst.
    loads = _on_off(8, 30, 40, 10.0) + [30.0] * 6 + [0.1] * 8
    memory = remember(_samples(loads), 0.25)
    assert memory is not None
    assert len(memory.onsets()) == 8  # all but the first (no gap before it)
    assert memory.median_gap_s() == pytest.approx(40.0, abs=5.0)


@pytest.mark.parametrize(
    ("tail", "in_gap_s"),
    [
        pytest.param([0.1] * 12, 60.0, id="idle-gap"),
        # A small burst above the gap line (2.6) but under the burst line (5.1) is no burst,
        # but the gap restarts after it.
        pytest.param([0.1] * 6 + [4.0] * 2 + [0.1] * 4, 20.0, id="small-burst-restarts-gap"),
    ],
)
def test_gap_length_counts_from_the_last_load_above_the_gap_line(
    tail: list[float], in_gap_s: float
) -> None:
    loads = _on_off(4, 30, 40, 10.0)[:-8] + tail
    memory = remember(_samples(loads), 0.25)
    assert memory is not None
    assert memory.in_gap_s == pytest.approx(in_gap_s, abs=5.0)


def test_no_long_window_after_a_burst_while_the_floor_holds(clock: FakeClock) -> None:
    # Bursts of 3000/s: once remembered, their floor keeps what the next one needs, and the
    # two-keep-cost window after a step down (which held each burst's own peak through every
    # gap) no longer applies.
    seen = _drive(clock, BURSTY, PolicyConfig(initial_spare_replicas=1.0))
    late = [g for t, g in seen if t > 14 * 5 * 4]
    assert any("burst_hold" in {r.code for r in g.reasons} for g in late)
    assert not any("after a step down" in g.line() for g in late)


def test_forecast_stops_at_the_bursts_peak_not_the_outlier(clock: FakeClock) -> None:
    # Ramps to 3000/s, one ramp to 9000/s among them; a new ramp's forecast may reach the
    # remembered bursts' p75 peak (3000/s), not the single highest load.
    ramp = [600.0 + 200.0 * i for i in range(13)]
    big = [600.0 + 700.0 * i for i in range(13)]
    rps = (ramp + [600.0] * 12) * 4 + big + [600.0] * 12 + (ramp + [600.0] * 12) * 4 + ramp
    seen = _drive(clock, rps, PolicyConfig(initial_spare_replicas=1.0))
    capped = [
        r
        for _t, g in seen[-30:]
        for r in g.reasons
        if r.code == "forecast" and "p75 peak" in r.message
    ]
    assert capped
    assert all(r.numbers["forecast_rps"] <= 3300.0 for r in capped)


def _memory(rises_s: list[float], in_gap_s: float) -> BurstMemory:
    bursts = tuple(Burst(peak_load=10.0, rise_s=r, lead_load=8.0) for r in rises_s)
    return BurstMemory(
        top_load=10.0,
        base_load=1.0,
        bursts=bursts,
        gaps_s=(40.0,) * max(0, len(bursts) - 1),
        load=1.0 if in_gap_s else 10.0,
        in_gap_s=in_gap_s,
        since_gap_s=None,
        rising=False,
    )


@pytest.mark.parametrize(
    ("rises_s", "in_gap_s", "released"),
    [
        # Keep cost 31 s: ramps reaching their peak in ~40 s need only the floor at onset.
        pytest.param([38.0, 42.0, 45.0], 10.0, True, id="slow-ramps-in-gap"),
        pytest.param([38.0, 42.0, 45.0], 0.0, False, id="slow-ramps-in-burst"),
        # Steps at their peak within a tick: a short gap may end in a burst at the last peak.
        pytest.param([5.0, 10.0, 15.0], 10.0, False, id="fast-bursts-in-gap"),
        pytest.param([31.0, 31.0], 10.0, False, id="rise-equal-to-keep-cost-holds"),
        pytest.param([20.0, 40.0, 50.0], 5.0, True, id="median-rise-decides"),
    ],
)
def test_release_to_floor_only_between_slow_bursts(
    rises_s: list[float], in_gap_s: float, released: bool
) -> None:
    assert release_to_floor(_memory(rises_s, in_gap_s), keep_cost_s=31.0) is released


def _ramps(cycles: int, ramp_ticks: int, base_ticks: int) -> list[float]:
    """600 -> 3000/s over `ramp_ticks` ticks, a sharp drop, `base_ticks` ticks at 600/s."""
    ramp = [600.0 + 2400.0 * i / (ramp_ticks - 1) for i in range(ramp_ticks)]
    return (ramp + [600.0] * base_ticks) * cycles


@pytest.mark.parametrize(
    ("rps", "released"),
    [
        # A 90 s ramp (rise ~55 s > keep cost 31 s): in the gap, down to the floor at once.
        pytest.param(_ramps(8, 19, 12), True, id="slow-ramps"),
        # Steps to 3000/s within a tick: the hold keeps the last peak for its 30 s.
        pytest.param(BURSTY, False, id="fast-bursts"),
    ],
)
def test_gap_after_slow_ramps_goes_to_the_floor_without_the_hold(
    clock: FakeClock, rps: list[float], released: bool
) -> None:
    seen = _drive(clock, rps, PolicyConfig(initial_spare_replicas=1.0))
    late = [g for t, g in seen if t > len(rps) * 5 / 2]
    held = [g for g in late if "scale_down_stabilized" in {r.code for r in g.reasons}]
    at_once = [g for g in late if "down to it at once" in g.line()]
    if released:
        assert at_once, [g.line() for g in late]
        assert all(g.desired < g.current for g in at_once)
        assert not any("burst_hold" in {r.code for r in g.reasons} for g in held)
    else:
        assert not at_once


@pytest.mark.parametrize(
    ("bursts", "quantile", "known"),
    [
        pytest.param(0, 0.75, False, id="none"),
        pytest.param(2, 0.75, False, id="two-p75-is-the-highest"),
        pytest.param(6, 0.75, False, id="six-p75-is-the-highest"),
        pytest.param(7, 0.75, True, id="seven-p75-is-the-6th"),
        pytest.param(2, 0.5, False, id="two-median-is-the-highest"),
        pytest.param(3, 0.5, True, id="three-median-is-the-2nd"),
    ],
)
def test_quantile_is_known_once_it_is_below_the_highest_burst(
    bursts: int, quantile: float, known: bool
) -> None:
    memory = dataclasses.replace(_memory([5.0] * bursts, 10.0))
    assert memory.knows_quantile(quantile) is known


def _stepped_down(
    now: float,
    *,
    recommended: int = 13,
    desired: int = 5,
    burst_floor: int = 0,
    floor_known: bool = False,
    next_start_at_s: float | None = None,
) -> Plan:
    """13 replicas; `recommended` 50 s ago, when arrivals stepped down; `desired` now."""
    s = make_signals(replicas=13, ready_replicas=13, collected_at=now, arrival_rps=300.0)
    state = GroupState(
        group=s.group,
        recommendations=((now - 50.0, recommended),),
        last_step_down_at=now - 50.0,
        observed_since=0.0,
    )
    return Plan(
        signals=s,
        state=state,
        desired=desired,
        diagnosis="over_provisioned",
        burst_floor=burst_floor,
        floor_known=floor_known,
        next_start_at_s=next_start_at_s,
    )


@pytest.mark.parametrize(
    ("floor_known", "expected"),
    [
        # A floor that is a quantile of enough bursts is the hold: down to it at once.
        pytest.param(True, 5, id="known-floor-replaces-the-window"),
        # The highest of a few bursts is no such hold: the window after the step down keeps
        # the 13 recommended 50 s ago (beyond the 40 s hold, within 2 keep costs, 82 s).
        pytest.param(False, 13, id="floor-of-a-few-keeps-the-window"),
    ],
)
def test_window_after_a_step_down_until_the_floor_is_a_quantile(
    floor_known: bool, expected: int
) -> None:
    plan = _stepped_down(500.0, burst_floor=5, floor_known=floor_known)
    assert stabilize_slo(plan, PolicyConfig(), 500.0).desired == expected


@pytest.mark.parametrize(
    ("next_start_at_s", "expected"),
    [
        # No schedule: the window after the step down (2 keep costs, 82 s from it, so up to
        # 532 s) keeps the 13 recommended 50 s ago.
        pytest.param(None, 13, id="no-schedule-keeps-the-window"),
        # The next burst's capacity is started at 700 s, after the window ends: holding
        # until then buys nothing.
        pytest.param(700.0, 5, id="start-after-the-window-ends"),
        pytest.param(532.0, 5, id="start-as-the-window-ends"),
        # Started at 520 s, before the window ends: the held replicas bridge to it.
        pytest.param(520.0, 13, id="start-within-the-window"),
        # The start is asked for already (its time has passed): the window holds.
        pytest.param(490.0, 13, id="start-already-asked-for"),
    ],
)
def test_window_after_a_step_down_before_a_scheduled_burst(
    next_start_at_s: float | None, expected: int
) -> None:
    now = 500.0
    out = stabilize_slo(_stepped_down(now, next_start_at_s=next_start_at_s), PolicyConfig(), now)
    assert out.desired == expected
    said = [r for r in out.reasons if r.code == "scale_down_before_schedule"]
    assert bool(said) == (expected == 5)
    if said:
        assert said[0].numbers == pytest.approx(
            {
                "window_kept": 13,
                "window_ends_in_s": 32.0,
                "next_start_in_s": next_start_at_s - now,
                "gap_hold_s": 82.0,
            }
        )


@pytest.mark.parametrize(
    ("recommended", "desired", "expected"),
    [
        # The window would have kept no more than the scale-down leaves: nothing to say.
        pytest.param(5, 5, 5, id="window-would-keep-no-more"),
        # The window is left out, but a scale-down by 1 of 13 is refused at the 10 % step:
        # no window was what stopped it, so none is named.
        pytest.param(13, 12, 13, id="step-too-small"),
    ],
)
def test_a_skipped_window_is_named_only_where_it_changed_the_count(
    recommended: int, desired: int, expected: int
) -> None:
    now = 500.0
    plan = _stepped_down(now, recommended=recommended, desired=desired, next_start_at_s=700.0)
    out = stabilize_slo(plan, PolicyConfig(scale_down_min_step_share=0.1), now)
    assert out.desired == expected
    assert "scale_down_before_schedule" not in {r.code for r in out.reasons}


def _scheduled_memory(now: float) -> BurstMemory:
    """Bursts left their gaps every 300 s, the last at `now` - 200: the next is due at
    `now` + 100."""
    bursts = tuple(
        Burst(peak_load=10.0, rise_s=5.0, lead_load=10.0, left_gap_at_s=now - 200.0 - 300.0 * k)
        for k in (3, 2, 1, 0)
    )
    return dataclasses.replace(_memory([5.0], 150.0), bursts=bursts, gaps_s=(270.0,) * 3)


@pytest.mark.parametrize(
    ("late_s", "start_at"),
    [
        # Due at 1 100 s; started a start (41 s) and a metrics window (15 s) ahead.
        pytest.param(0.0, 1044.0, id="due-later"),
        # Due 10 s ago: within a metrics window (15 s) the burst may not show yet.
        pytest.param(110.0, 1044.0, id="due-a-moment-ago"),
        # Over a metrics window after it was due and no burst: the schedule has ended.
        pytest.param(120.0, None, id="did-not-come"),
    ],
)
def test_the_next_start_the_plan_carries(late_s: float, start_at: float | None) -> None:
    now = 1000.0 + late_s
    s = make_signals(replicas=2, ready_replicas=2, collected_at=now, arrival_rps=30.0)
    plan = Plan(signals=s, state=GroupState(group=s.group), desired=2, diagnosis="steady")
    out = burst_due(plan, PolicyConfig(), _scheduled_memory(1000.0))
    assert out.next_start_at_s == (None if start_at is None else pytest.approx(start_at))


@pytest.mark.parametrize(
    ("rps", "held"),
    [
        # Ramps over 90 s, then 200 s at the base: the median gap (~250 s) is over 4 keep
        # costs (164 s), but a ramp's onset needs the floor however long the gap before it.
        pytest.param(_ramps(6, 19, 40), True, id="slow-ramps-long-base"),
        # Steps at their peak within a tick after 10 min idle: restarting is cheaper.
        pytest.param(([3000.0] * 6 + [0.0] * 120) * 3, False, id="fast-bursts-long-gaps"),
    ],
)
def test_long_gaps_hold_the_floor_only_for_slow_rises(
    clock: FakeClock, rps: list[float], held: bool
) -> None:
    seen = _drive(clock, rps, PolicyConfig(initial_spare_replicas=1.0))
    late = [g for t, g in seen if t > len(rps) * 5 / 2]
    holds = [r for g in late for r in g.reasons if r.code == "burst_hold"]
    if not held:
        assert not holds
        return
    assert holds, [g.line() for g in late]
    assert all(r.numbers["median_gap_s"] > 4 * r.numbers["keep_cost_s"] for r in holds)
    assert all("every onset needs it" in r.message for r in holds)
    # In the base the group sits at the floor, below the ramps' peak (3000/s = 10 busy + 1).
    assert min(g.desired for g in late) < 11


def _one_ramp_then_another(ramp_ticks: int) -> tuple[list[float], int]:
    """A base, a ramp 600 -> 3000/s over `ramp_ticks` ticks, a base, half the next ramp;
    and how many ticks that half is."""
    ramp = [600.0 + 2400.0 * i / (ramp_ticks - 1) for i in range(ramp_ticks)]
    half = ramp_ticks // 2
    return [600.0] * 12 + ramp + [600.0] * 12 + ramp[:half], half


@pytest.mark.parametrize(
    ("ramp", "met"),
    [
        # Time-to-ready 40 s, keep cost 41 s. A 90 s ramp rises ~50 s (gap line to 80 % of
        # its peak): slower than a keep cost, within two time-to-readies: met after one.
        pytest.param(_one_ramp_then_another(19), True, id="slow-ramp-once"),
        # A rise within a tick: one burst is not enough (the lag's growth shows it).
        pytest.param(
            ([600.0] * 12 + [3000.0] * 6 + [600.0] * 12 + [3000.0] * 3, 3), False, id="step"
        ),
        # A 180 s ramp rises ~95 s, slower than two time-to-readies: the trend follows it.
        pytest.param(_one_ramp_then_another(37), False, id="slower-than-two-starts"),
    ],
)
def test_one_remembered_slow_ramp_is_enough_to_meet_the_next(
    clock: FakeClock, ramp: tuple[list[float], int], met: bool
) -> None:
    rps, onset_ticks = ramp
    seen = _drive(clock, rps, PolicyConfig(initial_spare_replicas=1.0))
    second = [g for _, g in seen[-onset_ticks:]]
    rises = [g for g in second if "burst_rise" in {r.code for r in g.reasons}]
    assert bool(rises) is met, [g.line() for g in second]
    if met:
        assert max(g.desired for g in rises) >= 11  # the ramp peaked at 10 busy, + 1 spare
        reason = next(r for r in rises[0].reasons if r.code == "burst_rise")
        assert reason.numbers["bursts"] == 1.0
        assert "slower than the keep cost 41 s" in reason.message


def _gap_floors(
    clock: FakeClock, rps: list[float], margin: float
) -> list[tuple[float, float, int]]:
    """(bursts remembered, floor_known, floor) of every `burst_hold` in a gap."""
    config = PolicyConfig(initial_spare_replicas=1.0, burst_unknown_margin=margin)
    seen = _drive(clock, rps, config)
    return [
        (r.numbers["bursts"], r.numbers["floor_known"], int(r.numbers["floor"]))
        for _, g in seen
        for r in g.reasons
        if r.code == "burst_hold" and r.numbers["in_gap_s"] > 0
    ]


@pytest.mark.parametrize(
    ("rps", "margin", "few", "many"),
    [
        # Steps to 3000/s: 10 busy, 13 with the spare the policy learns here. With 2-6 bursts
        # remembered, p75 is only the highest, which the next exceeds with probability
        # 1 / (n + 1): 12.5 busy, 16 replicas; from the 7th burst on p75 is known.
        pytest.param(BURSTY, 0.25, 16, 13, id="fast-bursts-few-then-known"),
        pytest.param(BURSTY, 0.0, 13, 13, id="no-margin"),
        # Ramps: the lead load is part of a ramp, and the rise is sized at its onset.
        pytest.param(_ramps(8, 19, 12), 0.25, None, None, id="slow-ramps-unchanged"),
    ],
)
def test_a_floor_from_few_bursts_has_a_margin(
    clock: FakeClock, rps: list[float], margin: float, few: int | None, many: int | None
) -> None:
    floors = _gap_floors(clock, rps, margin)
    assert floors, "no hold in the gaps"
    assert any(not known for _, known, _ in floors), "no floor from few bursts"
    if few is None:
        plain = _gap_floors(FakeClock(), rps, 0.0)
        assert floors == plain
        return
    assert {f for _, known, f in floors if not known} == {few}
    assert {f for _, known, f in floors if known} == {many}


def _onsets(starts_s: list[float]) -> BurstMemory:
    bursts = tuple(
        Burst(peak_load=10.0, rise_s=5.0, lead_load=10.0, left_gap_at_s=t) for t in starts_s
    )
    return dataclasses.replace(_memory([5.0], 30.0), bursts=bursts)


@pytest.mark.parametrize(
    ("starts_s", "intervals", "due_s"),
    [
        pytest.param([0.0, 300.0, 600.0, 900.0], 3, 1200.0, id="every-300-s"),
        pytest.param([0.0, 290.0, 605.0, 900.0], 3, 1195.0, id="within-a-tenth"),
        pytest.param([0.0, 250.0, 600.0, 900.0], 3, None, id="one-interval-off-by-a-sixth"),
        # Only the newest intervals count: a schedule that changed is followed once it holds.
        pytest.param([0.0, 100.0, 700.0, 1000.0, 1300.0], 2, 1600.0, id="newest-intervals"),
        pytest.param([0.0, 300.0, 600.0], 3, None, id="too-few-onsets"),
        pytest.param([0.0, 300.0, 600.0, 900.0], 0, None, id="off"),
    ],
)
def test_next_due_only_for_bursts_that_keep_time(
    starts_s: list[float], intervals: int, due_s: float | None
) -> None:
    due = _onsets(starts_s).next_due(intervals, 0.1)
    if due_s is None:
        assert due is None
        return
    assert due is not None and due.at_s == pytest.approx(due_s)


def test_onsets_remember_when_they_left_their_gap() -> None:
    memory = remember(_samples(_on_off(4, 30, 270, 10.0)), 0.25)
    assert memory is not None
    assert [b.left_gap_at_s for b in memory.onsets()] == pytest.approx([300.0, 600.0, 900.0])


SCHEDULED = [3000.0 if i % 60 < 6 else 30.0 for i in range(60 * 7)]
"""A job every 5 min: 3000/s for 30 s, then 270 s at 30/s (gaps over 4 keep costs)."""


def test_bursts_on_a_schedule_are_met_by_capacity_started_before_them(clock: FakeClock) -> None:
    config = PolicyConfig(initial_spare_replicas=1.0)
    seen = _drive(clock, SCHEDULED, config)
    due = [(t, g) for t, g in seen if "burst_due" in {r.code for r in g.reasons}]
    assert due, "no start ahead of a burst once the schedule is known"
    # The gaps are too long to hold (the ski rental lets go in each).
    assert not any("burst_hold" in {r.code for r in g.reasons} for _, g in seen)
    for _t, g in due:
        reason = next(r for r in g.reasons if r.code == "burst_due")
        assert reason.numbers["period_s"] == pytest.approx(300.0)
        # Started within a start (41 s) + a metrics window (15 s) of the burst, not earlier.
        assert reason.numbers["lead_s"] == pytest.approx(41 + 15)
        assert 0 < reason.numbers["due_in_s"] <= reason.numbers["lead_s"]
        assert g.desired >= 11  # 3000/s at 300/s each: 10 busy + 1 spare
    # The first ask comes a whole lead ahead (less one 5 s tick), not at the last moment.
    first = [next(r for r in g.reasons if r.code == "burst_due") for _, g in due]
    assert max(r.numbers["due_in_s"] for r in first) > first[0].numbers["lead_s"] - 5
    # The first burst has no gap before it; from the one after the schedule's intervals are
    # seen on, each is met: the tick before it holds 11.
    before = dict(seen)
    for k in range(config.burst_schedule_intervals + 2, 7):
        burst_t = 5.0 + 300.0 * k  # the drive's first tick is at 5 s
        assert before[burst_t - 5.0].desired >= 11, k
    # Between the bursts the group goes back down.
    assert min(g.desired for t, g in seen if t > 1300) <= 2


def _down_after(seen: list[tuple[float, GroupDecision]], onset_s: float) -> float:
    """Seconds from a burst's onset to the first tick back at one replica."""
    return next(t for t, g in seen if t > onset_s and g.desired <= 1) - onset_s


def test_no_step_down_hold_when_the_schedule_starts_capacity_later(clock: FakeClock) -> None:
    """After a burst on a known schedule the group comes down without the hold after a
    step down: the next burst's capacity is started for it 3 minutes on either way."""
    config = PolicyConfig(initial_spare_replicas=1.0)
    seen = _drive(clock, SCHEDULED, config)
    unscheduled = _drive(
        FakeClock(), SCHEDULED, dataclasses.replace(config, burst_schedule_intervals=0)
    )
    onsets = [5.0 + 300.0 * k for k in range(1, 7)]  # the drive's first tick is at 5 s
    # The first burst (at 5 s) has no gap before it; the schedule is known at the onset that
    # completes its intervals.
    known = config.burst_schedule_intervals + 1
    for k, onset in enumerate(onsets, start=1):
        with_schedule, without = _down_after(seen, onset), _down_after(unscheduled, onset)
        if k < known:
            assert with_schedule == without, k
        else:
            assert with_schedule <= without - 20, k
    skipped = [(t, r) for t, g in seen for r in g.reasons if r.code == "scale_down_before_schedule"]
    assert skipped and min(t for t, _ in skipped) > onsets[known - 1]
    gap_hold = skipped[0][1].numbers["gap_hold_s"]
    assert gap_hold == pytest.approx(config.gap_hold_s(_tick(30.0, 1)))
    for _t, reason in skipped:
        assert reason.numbers["next_start_in_s"] > 0
        assert "the next burst on the schedule gets its capacity started in" in reason.message
    assert not any(
        r.code == "scale_down_before_schedule" for _, g in unscheduled for r in g.reasons
    )


def test_a_burst_that_does_not_come_ends_the_schedule(clock: FakeClock) -> None:
    rps = SCHEDULED[: 60 * 5] + [30.0] * 60 * 3
    seen = _drive(clock, rps, PolicyConfig(initial_spare_replicas=1.0))
    missed_at = 5.0 + 300.0 * 5
    due = [t for t, g in seen if "burst_due" in {r.code for r in g.reasons}]
    assert any(missed_at - 60 < t < missed_at for t in due)
    # One period on, nothing is started for the burst after the one that did not come.
    assert not [t for t in due if t > missed_at + 60]
    assert seen[-1][1].desired <= 2


def test_a_floor_the_hold_keeps_as_standby_is_left_to_it(clock: FakeClock) -> None:
    """Bursts every 150 s keep time, but their gaps (120 s) are short enough for
    `burst_hold`: with standby from 10 s into a gap (the user's choice) the floor waits as
    standby, and the schedule does not ask for it as consumers."""
    config = PolicyConfig(initial_spare_replicas=1.0, standby_after_gap_s=10.0)
    rps = [3000.0 if i % 30 < 6 else 30.0 for i in range(30 * 10)]
    seen = _drive(clock, rps, config, standby=True)
    assert any(g.standby > 0 for _, g in seen)
    assert not any("burst_due" in {r.code for r in g.reasons} for _, g in seen)

"""Burst-aware sizing: keep what the next likely burst needs through a gap, meet a rise early.

Stopping a replica in a gap and starting it again for the next burst costs its
time-to-ready plus a handover in replica-seconds, and the burst meets cold capacity for a
time-to-ready. So when the remembered bursts rise within two reaction times (the
time-to-ready, at least two metrics windows: `PolicyConfig.reaction_s`), and their
gaps are typically shorter than `burst_keep_factor` keep costs, the group keeps the
capacity the bursts needed before a replica started when they could first be seen would
serve (the `burst_peak_quantile` of their load within a keep cost of that moment, with the
learned spare: the peak of a burst that rises in seconds, less for a slow ramp, whose
rest `burst_rise` starts at once) as consumers until a gap lasts longer than any it
remembers plus one keep cost,
then as warm standby (loaded, not consuming; consuming within a handover) for one more
keep cost where the deployment has standby. Consumers come first because they serve a
burst's first seconds: a standby is promoted only once the next tick has seen the burst
(measured in docs/benchmarks.md). `standby_after_gap_s` moves held capacity to standby
earlier.

Where the remembered bursts rise slower than a keep cost (ramps, like the sawtooth family),
the floor is all a returning burst needs before capacity started at its onset serves: in a
gap the group goes down to the floor at once, without the scale-down hold that keeps the
last burst's peak (`release_to_floor`), and it keeps that floor however long the gaps are:
the floor is what every onset needs, not a bet that the next burst comes before a restart
would pay (gaps of 75-145 s on the sawtooth family, over four keep costs, left the group
with the hold of the last ramp's peak instead of the floor: 0.013-0.023x of the oracle).
Bursts that reach their peak within a keep cost keep that hold: one returning after a
short gap needs its peak at once, and the held peak covers the ones above the floor's
quantile (on the on-off family releasing at once lost up to 1.1 points of attainment for
0.02-0.03x of cost).

Gaps too long to hold through are let go, but bursts that keep time (a job every five
minutes) are not a surprise: when the last onsets came at a steady interval, what the next
burst needs is started a start's time, a metrics window and the interval's spread before
it is due (`burst_due`).

When the load leaves a gap and keeps rising, and the remembered bursts rose to their peak
within a known time, the group is sized for their `burst_peak_quantile` peak at once
rather than step by step behind the rise; a forecast is not trusted beyond that peak
(ramps that always end at the same height; a burst's onset is a steep line for a tick).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from scaler.config import PolicyConfig
from scaler.decision import Reason, reason_number, reason_percent
from scaler.policy.bursts import BurstMemory, remember
from scaler.policy.headroom import replicas_for
from scaler.policy.plan import Plan
from scaler.policy.rate import arriving_rps, window
from scaler.policy.shares import busiest_share, shares_count


def release_to_floor(memory: BurstMemory, keep_cost_s: float) -> bool:
    """In a gap between bursts that rise slower than a keep cost: the floor is the whole hold.

    A burst that takes longer than a keep cost to reach its peak needs, before a replica
    started at its onset serves, only its load within that keep cost (the lead the floor is
    sized for); the rest `burst_rise` starts at the onset. Holding the last burst's peak
    through the gap buys nothing then (sawtooth: 0.04-0.06x of the oracle's cost).
    """
    return memory.in_gap_s > 0 and memory.median_rise_s() > keep_cost_s


def burst_memory(plan: Plan, config: PolicyConfig) -> BurstMemory | None:
    """The remembered load plus this tick's sample, split into bursts and gaps: made once
    a tick (`slo.size`) and handed to the steps below."""
    s = plan.signals
    samples = window(plan.state.load_samples, config.burst_memory_s, s.collected_at)
    now = tick_load(plan)
    if now is not None:
        samples = (*samples, now)
    return remember(samples, config.burst_low_share, lead_s=config.keep_cost_s(s))


def tick_load(plan: Plan) -> tuple[float, float] | None:
    """This tick's (time, load in busy replicas), not yet remembered; None without a rate."""
    s, state = plan.signals, plan.state
    mu = s.service_rps_per_replica or state.service_rps_per_replica
    arriving = arriving_rps(s, state)
    if arriving is None or not (mu or arriving == 0):
        return None
    return s.collected_at, arriving / mu if mu else 0.0


def _shares_note(by_mean: int, floor: int, partitions: int) -> str:
    """How a floor raised for partition shares says so (nothing when it was not)."""
    if floor <= by_mean:
        return ""
    return (
        f" ({reason_number(by_mean)} would leave one of them {busiest_share(by_mean, partitions)}"
        f" of the {reason_number(partitions)} partitions)"
    )


@dataclass(frozen=True)
class FloorNeed:
    """What the remembered bursts need held before one comes (`burst_hold`, `burst_due`)."""

    lead: float
    """Busy replicas' worth: the bursts' load within a keep cost of their onset."""
    known: bool
    """Enough bursts are remembered for `burst_peak_quantile` to lie below the highest."""
    margin: float
    """The share added to `lead` while too few bursts are known for the quantile."""
    by_mean: int
    floor: int
    """`by_mean`, raised until no consumer's partitions leave it over capacity."""


def _floor_need(memory: BurstMemory, plan: Plan, config: PolicyConfig) -> FloorNeed:
    """The replicas the next burst needs at once: its lead load with the learned spare."""
    s = plan.signals
    known = memory.knows_quantile(config.burst_peak_quantile)
    lead = memory.lead_peak(config.burst_peak_quantile)
    # Bursts at their peak within a keep cost, too few for the quantile: the highest of a few
    # is what the next one exceeds with probability 1 / (n + 1), so it gets a margin. A slow
    # ramp's lead is part of a ramp, and `burst_rise` sizes the rest at its onset.
    quick = memory.median_rise_s() <= config.keep_cost_s(s)
    margin = config.burst_unknown_margin if not known and quick else 0.0
    lead *= 1 + margin
    by_mean = replicas_for(lead, plan.state, config)
    # Each consumer serves its own partitions: a floor that leaves some with more of them
    # than the rest leaves those over capacity when the burst comes (`shares.py`).
    floor = shares_count(by_mean, lead, s, config.burst_floor_busiest_max_utilization)
    return FloorNeed(lead=lead, known=known, margin=margin, by_mean=by_mean, floor=floor)


def burst_hold(plan: Plan, config: PolicyConfig, memory: BurstMemory | None) -> Plan:
    """Floor the group at the bursts' need while gaps are short, then briefly as standby.

    Two stages, like renting skis: through a gap no longer than any remembered one (plus
    one keep cost) the capacity stays consuming, so the next burst meets it at once; for
    one more keep cost after that it waits as warm standby where the deployment has it
    (a burst then costs a handover instead of a cold start), then it is stopped: by then
    keeping it has cost what starting it again would.
    """
    s = plan.signals
    if memory is None or not memory.bursty(config.burst_min_count, config.burst_min_ratio):
        return plan
    reaction, keep = config.reaction_s(s), config.keep_cost_s(s)
    rise, gap = memory.median_rise_s(), memory.median_gap_s()
    limit = max(memory.gaps_s, default=0.0) + keep
    standby = s.standby_replicas is not None
    # The gap test is a ski rental: keep or restart. Bursts that rise slower than a keep cost
    # need their floor at every onset, however long the gap before it (`release_to_floor`).
    if rise > 2 * reaction or (gap > config.burst_keep_factor * keep and rise <= keep):
        return plan
    if memory.in_gap_s > limit + (keep if standby else 0.0):
        return plan
    release = release_to_floor(memory, keep)
    need = _floor_need(memory, plan, config)
    lead, margin, floor = need.lead, need.margin, need.floor
    plan = dataclasses.replace(
        plan, burst_floor=floor, floor_known=need.known, release_to_floor=release
    )
    if floor <= plan.desired:
        return plan
    numbers = {
        "bursts": float(len(memory.onsets())),
        "lead_load": lead,
        "peak_load": memory.peak(config.burst_peak_quantile),
        "median_rise_s": rise,
        "median_gap_s": gap,
        "keep_cost_s": keep,
        "in_gap_s": memory.in_gap_s,
        "floor": floor,
        "floor_by_mean": need.by_mean,
        "release_to_floor": float(release),
        "floor_known": float(need.known),
        "unknown_margin": margin,
    }
    kept_for = (
        f"median gap {reason_number(gap)} s <= {config.burst_keep_factor:g} x keep cost "
        f"{reason_number(keep)} s"
        if gap <= config.burst_keep_factor * keep
        else f"median gap {reason_number(gap)} s, but they rise slower than the keep cost "
        f"{reason_number(keep)} s: every onset needs it"
    )
    text = (
        f"{len(memory.onsets())} bursts rising in ~{reason_number(rise)} s (<= 2 x "
        f"{reason_number(reaction)} s for new capacity to answer one), "
        f"{reason_number(lead, 1)} busy replicas (p{config.burst_peak_quantile * 100:.0f}"
        f"{f', the highest of a few + {reason_percent(margin)}' if margin else ''}) within "
        f"{reason_number(keep)} s of their start needs {reason_number(floor)}"
        f"{_shares_note(need.by_mean, floor, s.partitions)}; {kept_for}"
    )
    after = config.standby_after_gap_s
    early = after is not None and memory.in_gap_s >= after
    if standby and (memory.in_gap_s > limit or early):
        why = (
            f"{reason_number(memory.in_gap_s)} s into a gap, longer than any remembered + keep "
            f"cost ({reason_number(limit)} s)"
            if memory.in_gap_s > limit
            else f"{reason_number(memory.in_gap_s)} s into a gap (standby after "
            f"{reason_number(after or 0.0)} s)"
        )
        return dataclasses.replace(plan, warm_total=floor).with_(
            reason=Reason(
                "burst_standby",
                f"{text}; {why}: {reason_number(floor - plan.desired)} wait as warm standby",
                {**numbers, "gap_limit_s": limit},
            )
        )
    released = (
        f"; {reason_number(memory.in_gap_s)} s into a gap and they rise slower than the keep cost: "
        "down to it at once"
        if release and floor < plan.current
        else ""
    )
    return plan.with_(
        desired=floor,
        diagnosis="steady" if floor <= plan.current else "capacity_bound",
        reason=Reason("burst_hold", f"{text}: keep {reason_number(floor)}{released}", numbers),
    )


def burst_due(plan: Plan, config: PolicyConfig, memory: BurstMemory | None) -> Plan:
    """Bursts on a schedule: start what the next one needs a start's time before it is due.

    Gaps longer than the keep factor allows are let go (`burst_hold`), and each burst then
    meets cold capacity for a time-to-ready. When the remembered onsets keep time
    (`BurstMemory.next_due`), the floor is started a time-to-ready + `rebalance_pause_s`,
    plus a metrics window (a burst shows in the rates that late) and the schedule's
    spread, before the next is due. It is asked for until the burst shows (its first sample
    above the gap line; then the burst's own signals and the scale-down hold size the
    group) or one metrics window + the spread after it was due; one that does not come
    ends the schedule. Where `burst_hold` keeps the floor through the gap (as consumers
    or as warm standby) this adds nothing: it is for the gaps the hold lets go. In such a
    gap the plan carries when the next start comes (`Plan.next_start_at_s`): the
    scale-down's hold after the burst's step down is no use if it ends before then.
    """
    if config.burst_schedule_intervals < 1:
        return plan
    if plan.burst_floor > 0:  # `burst_hold` keeps it through this gap (consumers or standby)
        return plan
    s = plan.signals
    if memory is None or memory.in_gap_s <= 0:
        return plan
    if not memory.bursty(config.burst_min_count, config.burst_min_ratio):
        return plan
    due = memory.next_due(config.burst_schedule_intervals, config.burst_schedule_tolerance_share)
    if due is None:
        return plan
    start = config.time_to_ready_s(s) + config.rebalance_pause_s
    lead = start + config.metrics_window_s + due.spread_s
    if s.collected_at > due.at_s + due.spread_s + config.metrics_window_s:
        return plan  # it did not come: the schedule has ended
    plan = dataclasses.replace(plan, next_start_at_s=due.at_s - lead)
    if s.collected_at < due.at_s - lead:
        return plan
    need = _floor_need(memory, plan, config)
    if need.floor <= plan.desired:
        return plan
    due_in = due.at_s - s.collected_at
    return plan.with_(
        desired=need.floor,
        diagnosis="capacity_bound",
        reason=Reason(
            "burst_due",
            f"the last {config.burst_schedule_intervals + 1} bursts left their gaps every "
            f"{reason_number(due.period_s)} s (each within {reason_number(due.spread_s)} s):"
            f" the next is due in {reason_number(due_in)} s, started {reason_number(lead)} s"
            f" ahead (a start {reason_number(start)} s + a metrics window "
            f"{reason_number(config.metrics_window_s)} s + the spread); "
            f"{reason_number(need.lead, 1)} busy replicas (p"
            f"{config.burst_peak_quantile * 100:.0f}"
            f"{f', the highest of a few + {reason_percent(need.margin)}' if need.margin else ''})"
            f" at its onset need {reason_number(need.floor)}"
            f"{_shares_note(need.by_mean, need.floor, s.partitions)}",
            {
                "period_s": due.period_s,
                "spread_s": due.spread_s,
                "due_in_s": due_in,
                "lead_s": lead,
                "start_takes_s": start,
                "lead_load": need.lead,
                "floor": need.floor,
            },
        ),
    )


def rise_known(memory: BurstMemory, plan: Plan, config: PolicyConfig) -> bool:
    """Enough is remembered to meet a rise at the bursts' peak: `burst_min_count` of them,
    or one that rose slower than a keep cost and within two reaction times.

    Such a ramp outruns what follows it: the trend test saw sawtooth-s1's first two ramps
    54 and 34 s after they started, a start serves 30 s after that, and by then the group
    queued past the SLO (3 545 of the hour's 4 388 late requests at x20). A burst that
    reaches its peak within a keep cost shows in the lag's growth at the next tick (the
    fast path); one remembered burst is too few to keep a floor for (`burst_hold`).
    """
    if memory.bursty(config.burst_min_count, config.burst_min_ratio):
        return True
    s = plan.signals
    slow = config.keep_cost_s(s) < memory.median_rise_s() <= 2 * config.reaction_s(s)
    return slow and memory.bursty(1, config.burst_min_ratio)


def burst_rise(plan: Plan, config: PolicyConfig, memory: BurstMemory | None) -> Plan:
    """A burst like the remembered ones has started: size for their peak now."""
    if memory is None or memory.since_gap_s is None or not memory.rising:
        return plan
    onsets = memory.onsets()
    if not rise_known(memory, plan, config):
        return plan
    if memory.since_gap_s > memory.median_rise_s():
        return plan
    peak = memory.peak(config.burst_peak_quantile)
    target = replicas_for(peak, plan.state, config)
    if target <= plan.desired:
        return plan
    keep = config.keep_cost_s(plan.signals)
    few = (
        f" (fewer than {config.burst_min_count}, but slower than the keep cost "
        f"{reason_number(keep)} s)"
        if len(onsets) < config.burst_min_count
        else ""
    )
    return plan.with_(
        desired=target,
        diagnosis="capacity_bound",
        reason=Reason(
            "burst_rise",
            f"load left its gap {reason_number(memory.since_gap_s)} s ago, "
            f"{reason_number(memory.load, 1)} busy replicas "
            "and rising; "
            f"the last {len(onsets)}{few} rose to {reason_number(peak, 1)} "
            f"(p{config.burst_peak_quantile * 100:.0f}) within "
            f"~{reason_number(memory.median_rise_s())} s: {reason_number(target)} now",
            {
                "since_gap_s": memory.since_gap_s,
                "load": memory.load,
                "peak_load": peak,
                "median_rise_s": memory.median_rise_s(),
                "bursts": float(len(onsets)),
                "keep_cost_s": keep,
                "needed": target,
            },
        ),
    )


def forecast_cap_load(memory: BurstMemory | None, config: PolicyConfig) -> float | None:
    """The highest load a forecast may reach while bursts repeat: what `burst_rise` sizes for.

    A burst's onset is a steep line for a few ticks; extrapolated a time-to-ready ahead it
    asked for the highest load ever remembered (on the on-off family 23-32 replicas where
    the bursts' p75 needed 17-21), and the scale-down pacing then kept that for minutes.
    """
    if memory is None or not memory.bursty(config.burst_min_count, config.burst_min_ratio):
        return None
    return max(memory.peak(config.burst_peak_quantile), memory.load)

"""Burst-aware floor and warm standby: keep what the next likely burst needs through a gap.

Stopping a replica in a gap and starting it again for the next burst costs its
time-to-ready plus a handover in replica-seconds, and the burst meets cold capacity for a
time-to-ready. So when the remembered bursts rise faster than a replica starts, and their
gaps are typically shorter than `burst_keep_factor` keep costs, the group keeps the
capacity a typical burst needed (its median peak at the safe utilization) until a gap
lasts longer than any it remembers plus one keep cost. Where the deployment has warm
standby and `standby_after_gap_s` is set, capacity held longer than that into a gap waits
as standby (loaded, not consuming, consuming within a handover) instead of idle consumers.
"""

from __future__ import annotations

import dataclasses

from scaler.policy.bursts import BurstMemory, remember
from scaler.policy.headroom import replicas_for
from scaler.policy.plan import Plan
from scaler.signals import PolicyConfig, Reason


def burst_memory(plan: Plan, config: PolicyConfig) -> BurstMemory | None:
    """The remembered load plus this tick's sample, split into bursts and gaps."""
    s, state = plan.signals, plan.state
    samples = state.load_samples
    mu = s.service_rps_per_replica or state.service_rps_per_replica
    if s.arrival_rps is not None and (mu or s.arrival_rps == 0):
        samples = (*samples, (s.collected_at, s.arrival_rps / mu if mu else 0.0))
    return remember(samples, config.burst_low_share)


def burst_hold(plan: Plan, config: PolicyConfig) -> Plan:
    """Floor the group at a typical burst's need while gaps are short; maybe as standby."""
    s = plan.signals
    memory = burst_memory(plan, config)
    if memory is None or len(memory.onsets()) < config.burst_min_count:
        return plan
    ttr, keep = config.time_to_ready_s(s), config.keep_cost_s(s)
    rise, gap = memory.median_rise_s(), memory.median_gap_s()
    limit = max(memory.gaps_s, default=0.0) + keep
    if rise > ttr or gap > config.burst_keep_factor * keep or memory.in_gap_s > limit:
        return plan
    peak = memory.typical_peak()
    floor = replicas_for(peak, plan.state, config)
    if floor <= plan.desired:
        return plan
    numbers = {
        "bursts": float(len(memory.onsets())),
        "median_peak_load": peak,
        "median_rise_s": rise,
        "median_gap_s": gap,
        "keep_cost_s": keep,
        "in_gap_s": memory.in_gap_s,
        "floor": floor,
    }
    text = (
        f"{len(memory.onsets())} bursts rising in ~{rise:.0f} s (< {ttr:.0f} s to start one), "
        f"median peak {peak:.1f} busy replicas needs {floor}; median gap "
        f"{gap:.0f} s <= {config.burst_keep_factor:g} x keep cost {keep:.0f} s"
    )
    after = config.standby_after_gap_s
    if s.standby_replicas is not None and after is not None and memory.in_gap_s >= after:
        return dataclasses.replace(plan, standby=floor - plan.desired).with_(
            reason=Reason(
                "burst_standby",
                f"{text}; {memory.in_gap_s:.0f} s into a gap: {floor - plan.desired} "
                "wait as warm standby",
                numbers,
            )
        )
    return plan.with_(
        desired=floor,
        diagnosis="steady" if floor <= plan.current else "capacity_bound",
        reason=Reason("burst_hold", f"{text}: keep {floor}", numbers),
    )

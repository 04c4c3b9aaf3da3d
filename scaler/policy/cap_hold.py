"""After the load needed the group's cap, scale down as slowly as HPA does.

The SLO policy's scale-down hold is short (the reaction time): a load that comes back
after it meets cold replicas for a start, and the spare the group is sized with drains the
backlog they leave. At the group's cap there is no such spare: every replica the topic's
partitions (or `max_replicas`) allow is serving, and the backlog a cold start builds drains
only when the load falls again. A load that needed the cap and comes back within minutes
then meets cold replicas for its whole length: on `periodic` x30 (a 60 s job every five
minutes at the cap), three such bursts left `slo` at 86 % of the hour's requests in time
against hpa-util's 96 %, whose 300 s window never let go (docs/benchmarks.md, "Stop 51").

So after a load that would run the cap at `target_utilization`, the scale-down keeps the
cap for `cap_hold_s` (HPA's 300 s). The burst memory can say the load stays away longer: a
gap it remembers, or the quiet stretch before its first burst, at least as long as the
hold means paying for it buys nothing (two bursts half an hour apart, `rare` x30:
0.97-1.03x the oracle's replica-seconds with this test, 1.55-1.68x without). The longest
remembered stretch counts, so one job that does not come turns the hold off until that
gap leaves the memory (`burst_memory_s`).
"""

from __future__ import annotations

import dataclasses

from scaler.config import PolicyConfig
from scaler.policy.bursts import BurstMemory
from scaler.policy.guards import group_cap
from scaler.policy.hold import tick_load
from scaler.policy.plan import CapHold, Plan


def cap_hold(plan: Plan, config: PolicyConfig, memory: BurstMemory | None) -> Plan:
    """Set `plan.cap_hold` while the load needed the cap within `cap_hold_s` and no quiet
    stretch the burst memory saw lasted that long."""
    hold = config.cap_hold_s
    if hold <= 0:
        return plan
    longest = memory.longest_quiet_s() if memory is not None else 0.0
    if longest >= hold:
        return plan
    now, cap = plan.signals.collected_at, group_cap(plan.signals)
    line = cap * config.target_utilization
    samples = [*plan.state.load_samples, tick_load(plan)]
    needed = [(t, load) for t, load in filter(None, samples) if now - t < hold and load >= line]
    if not needed:
        return plan
    found = CapHold(
        hold_s=hold,
        cap=cap,
        line=line,
        load=max(load for _, load in needed),
        ago_s=now - max(t for t, _ in needed),
        longest_quiet_s=longest,
    )
    return dataclasses.replace(plan, cap_hold=found)

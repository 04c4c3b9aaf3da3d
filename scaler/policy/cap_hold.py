"""After the load needed the group's cap, scale down as slowly as HPA does.

The SLO policy's scale-down hold is short (the reaction time): a load that comes back
after it meets cold replicas for a start, and the spare the group is sized with drains the
backlog they leave. At the group's cap there is no such spare: every replica the topic's
partitions (or `max_replicas`) allow is serving, and the backlog a cold start builds drains
only when the load falls again. A load that needed the cap and comes back within minutes
then meets cold replicas for its whole length: on `periodic` x30 (a 60 s job every five
minutes at the cap), three such bursts left `slo` at 86 % of the hour's requests in time
against hpa-util's 96 %, whose 300 s window never let go (docs/benchmarks.md, "Stop 51").

So after a load that would run the cap at `target_utilization`, the scale-down window is
`cap_hold_s` (HPA's 300 s). The burst memory can say the load stays away longer: a gap it
remembers, or the quiet stretch before its first burst, longer than the hold means paying
for it buys nothing (two bursts half an hour apart, `rare` x30: 1.03x the oracle's
replica-seconds with this test, 1.55-1.68x without).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from scaler.config import PolicyConfig
from scaler.decision import reason_number, reason_percent
from scaler.policy.bursts import BurstMemory
from scaler.policy.plan import Plan
from scaler.policy.rate import window


@dataclass(frozen=True)
class CapHold:
    """Why the scale-down waits `hold_s` (`cap_hold`): the load needed the cap `ago_s` ago."""

    hold_s: float
    cap: int
    load: float
    """The highest load (busy replicas' worth) in the hold, at or above `cap` x the target."""
    target: float
    """`target_utilization`: the load needed the cap at `cap` x this."""
    ago_s: float
    longest_quiet_s: float
    """The longest stretch under the burst memory's gap line it saw (0: none yet)."""

    def text(self) -> str:
        """The clause a held scale-down's reason adds."""
        quiet = (
            f"the longest quiet stretch remembered is {reason_number(self.longest_quiet_s)} s"
            if self.longest_quiet_s > 0
            else "no quiet stretch is remembered yet"
        )
        return (
            f"{reason_number(self.ago_s)} s ago the load needed the cap of "
            f"{reason_number(self.cap)} ({reason_number(self.load, 1)} busy replicas' worth, "
            f">= {reason_percent(self.target)} of it); {quiet}"
        )


def group_cap(plan: Plan) -> int:
    """The most consumers the group can use: its partitions, or `max_replicas` if lower."""
    s = plan.signals
    return min(s.partitions, s.max_replicas if s.max_replicas is not None else s.partitions)


def cap_hold(plan: Plan, config: PolicyConfig, memory: BurstMemory | None) -> Plan:
    """Set `plan.cap_hold` when the load needed the cap within `cap_hold_s` and the burst
    memory has seen no quiet stretch at least that long."""
    hold = config.cap_hold_s
    if hold <= 0:
        return plan
    s, cap = plan.signals, group_cap(plan)
    longest = memory.longest_quiet_s() if memory is not None else 0.0
    if longest >= hold:
        return plan
    line = cap * config.target_utilization
    now = s.collected_at
    # The newest sample is the burst memory's own (this tick's load, not yet remembered).
    recent = window(plan.state.load_samples, hold, now)
    if memory is not None:
        recent = (*recent, (now, memory.load))
    needed = [(t, load) for t, load in recent if load >= line]
    if not needed:
        return plan
    at, _ = needed[-1]
    peak = max(load for _, load in needed)
    found = CapHold(
        hold_s=hold,
        cap=cap,
        load=peak,
        target=config.target_utilization,
        ago_s=now - at,
        longest_quiet_s=longest,
    )
    return dataclasses.replace(plan, cap_hold=found)

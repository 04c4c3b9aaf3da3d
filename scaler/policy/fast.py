"""The fast path: when lag grows faster than ready capacity can drain, size for it at once.

Like Knative's panic window: the collector's arrival rate is a window average and trails
a sudden burst, but the lag's growth between two ticks shows it within one tick. Arrivals
now are at least what the ready replicas complete plus what piles up; the group is sized
for that and for draining the backlog it will have by the time new capacity serves
(a warm standby's handover, else a cold start), in one step.
"""

from __future__ import annotations

from scaler.config import PolicyConfig
from scaler.decision import Reason, reason_number
from scaler.policy.counts import ceil_count
from scaler.policy.headroom import replicas_for
from scaler.policy.plan import Plan
from scaler.policy.rate import arriving_rps
from scaler.policy.rebalance import queue_budget_ms

_EPS = 1e-9


def fast_path(plan: Plan, config: PolicyConfig) -> Plan:
    """Size for the observed growth when the backlog outruns the ready replicas."""
    s, state = plan.signals, plan.state
    mu = s.service_rps_per_replica or state.service_rps_per_replica
    if state.last_lag is None or s.lag is None or not mu or s.arrival_rps is None:
        return plan
    then, lag_then = state.last_lag
    dt = s.collected_at - then
    if dt <= 0:
        return plan
    growth = (s.lag - lag_then) / dt
    capacity = min(s.ready_replicas, s.partitions) * mu
    allowed = s.arrival_rps * queue_budget_ms(s) / 1000
    if growth <= config.panic_growth_share * max(capacity, mu) or s.lag <= allowed:
        return plan
    arriving = arriving_rps(s, state) or s.arrival_rps
    by_rate = replicas_for(arriving / mu, state, config)
    warm = s.standby_ready_replicas if s.standby_replicas is not None else 0
    wait_s = config.rebalance_pause_s if by_rate - s.replicas <= warm else config.time_to_ready_s(s)
    projected = s.lag + (growth * wait_s if s.starting_replicas == 0 else 0.0)
    needed = ceil_count(by_rate + projected / (mu * config.backlog_drain_s) - _EPS)
    if needed <= plan.desired:
        return plan
    return plan.with_(
        desired=needed,
        diagnosis="capacity_bound",
        reason=Reason(
            "fast_path",
            f"lag {reason_number(s.lag)} growing {reason_number(growth)}/s past "
            f"{reason_number(capacity)}/s ready capacity: arrivals ~{reason_number(arriving)}/s "
            f"need {reason_number(by_rate)}, {reason_number(projected)} queued by "
            f"{reason_number(wait_s)} s drain in {reason_number(config.backlog_drain_s)} s: "
            f"{reason_number(needed)} at once",
            {
                "lag": s.lag,
                "lag_growth_rps": growth,
                "ready_capacity_rps": capacity,
                "arriving_rps": arriving,
                "projected_lag": projected,
                "needed": needed,
            },
        ),
    )

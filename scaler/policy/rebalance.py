"""Membership-change-aware steps of the SLO policy: scale-up rounding and scale-down pacing.

Every membership change of a consumer group pauses the partitions that move (with
incremental handover; all of them with aiokafka's eager rebalance), and every request
caught in that pause may miss a sub-second SLO. A step therefore has a price in
attainment as well as in replicas; `scale_up_min_step_share` and
`scale_down_min_step_share` trade the two where changes are expensive.
"""

from __future__ import annotations

from scaler.config import PolicyConfig
from scaler.decision import Reason, reason_number
from scaler.policy.counts import ceil_count
from scaler.policy.plan import Plan
from scaler.signals import GroupSignals


def queue_budget_ms(s: GroupSignals) -> float:
    """Queue time the SLO leaves once the engine's p99 is spent (at least 10% of the SLO)."""
    engine = s.engine_p99_ms or 0.0
    return max(s.slo_p99_e2e_ms - engine, 0.1 * s.slo_p99_e2e_ms)


def scale_up_step(plan: Plan, config: PolicyConfig) -> Plan:
    """Round a scale-up to at least `scale_up_min_step_share` of current: one rebalance, not two."""
    current = plan.current
    if plan.desired <= current or plan.diagnosis == "engine_bound":
        return plan
    step = max(1, ceil_count(config.scale_up_min_step_share * current - 1e-9))
    if plan.desired >= current + step:
        return plan
    return plan.with_(
        desired=current + step,
        reason=Reason(
            "scale_up_step",
            f"scale-up to {reason_number(plan.desired)} rounded to {reason_number(current + step)} "
            f"(+{reason_number(step)}): "
            "fewer, larger membership changes",
            {"wanted": plan.desired, "step": step},
        ),
    )

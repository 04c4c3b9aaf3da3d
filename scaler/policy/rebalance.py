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

QUEUE_BUDGET_FLOOR_SHARE = 0.1
"""The queue budget is never under this share of the SLO (an engine p99 near the SLO)."""


def queue_budget_ms(s: GroupSignals) -> float:
    """The queue p99 that would have put the window's e2e p99 at the SLO (at least 10 % of it).

    That is the SLO less what of the e2e p99 the engine took (`engine_part_ms`). p99s do not
    add: the requests that waited longest are rarely those the engine took longest on, so
    the SLO less the engine's p99 left the queue less than the SLO did. On flash-crowd-s1
    ×30, at 110/s with a queue p99 of 217 ms, the e2e p99 was 352 ms: 135 ms besides the
    wait, against an engine p99 of 213 ms, so a budget of 365 ms, not 287
    (docs/benchmarks.md, "Stop 52").
    """
    return max(s.slo_p99_e2e_ms - engine_part_ms(s), QUEUE_BUDGET_FLOOR_SHARE * s.slo_p99_e2e_ms)


def engine_part_ms(s: GroupSignals) -> float:
    """What of the window's e2e p99 was the engine's: e2e p99 - queue p99, at most the
    engine's p99.

    At most the engine's p99: live, the e2e p99 runs from the client's produce, so it also
    holds ingest, the broker's hops and the client's clock, time no replica shrinks (a
    stalled ingest would have pushed the budget to its floor and the spare to its cap).
    Without both p99s, or with the e2e p99 under the queue p99 (they are p99s of different
    requests, and from workers before stop 53 the queue's is the queue's plus the batch
    wait's, an upper bound), the engine's p99; 0 without that.
    """
    engine = s.engine_p99_ms
    e2e, queue = s.e2e_p99_ms, s.queue_p99_ms
    if e2e is None or queue is None or e2e < queue:
        return engine or 0.0
    return e2e - queue if engine is None else min(e2e - queue, engine)


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

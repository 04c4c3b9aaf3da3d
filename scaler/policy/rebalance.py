"""Rebalance-aware steps of the SLO policy: fewer, larger scale steps, and a confident scale-down.

Every membership change of a Kafka consumer group (aiokafka rebalances eagerly) stops all
of the group's consumers for a moment, and every request caught in that pause misses a
sub-second SLO. A scale step therefore has a price in attainment as well as in replicas,
so the policy buys capacity in larger steps and gives it back only when it is worth a
rebalance.
"""

from __future__ import annotations

import dataclasses
import math

from scaler.forecast import holt
from scaler.policy.guards import stabilize
from scaler.policy.plan import Plan
from scaler.signals import GroupSignals, PolicyConfig, Reason


def queue_budget_ms(s: GroupSignals) -> float:
    """Queue time the SLO leaves once the engine's p99 is spent (at least 10% of the SLO)."""
    engine = s.engine_p99_ms or 0.0
    return max(s.slo_p99_e2e_ms - engine, 0.1 * s.slo_p99_e2e_ms)


def scale_up_step(plan: Plan, config: PolicyConfig) -> Plan:
    """Round a scale-up to at least `scale_up_min_step_share` of current: one rebalance, not two."""
    current = plan.current
    if plan.desired <= current or plan.diagnosis == "engine_bound":
        return plan
    step = max(1, math.ceil(config.scale_up_min_step_share * current - 1e-9))
    if plan.desired >= current + step:
        return plan
    return plan.with_(
        desired=current + step,
        reason=Reason(
            "scale_up_step",
            f"scale-up to {plan.desired} rounded to {current + step} (+{step}): "
            "each membership change pauses the whole group",
            {"wanted": plan.desired, "step": step},
        ),
    )


def _queue_calm(plan: Plan) -> bool:
    """Queue p99 at most half the SLO's queue budget: the rate-based count is not hiding bursts."""
    s = plan.signals
    return s.queue_p99_ms is not None and s.queue_p99_ms <= 0.5 * queue_budget_ms(s)


def _rising(plan: Plan, config: PolicyConfig) -> bool:
    """The arrival forecast one time-to-ready ahead is above the current arrival rate."""
    s = plan.signals
    if s.arrival_rps is None:
        return True
    samples = (*plan.state.arrival_samples, (s.collected_at, s.arrival_rps))
    fc = holt(samples, config.horizon_s(s), config.forecast_alpha, config.forecast_beta)
    return fc is not None and fc.value > s.arrival_rps


def stabilize_rebalance_aware(plan: Plan, config: PolicyConfig, now: float) -> Plan:
    """HPA's window, a shorter confident path, one scale-down per hold, and a minimum step.

    The HPA window (`scale_down_window_s`) holds the highest recommendation it saw. When
    every recommendation over the last `hold_s` (default 2 x time-to-ready: holding an idle
    replica longer costs more than starting it again) was at most
    `scale_down_confident_share` of current, the queue is calm and the forecast is not
    rising, drop to the highest of those instead. At most one scale-down per `hold_s`.
    A drop smaller than `scale_down_min_step_share` of current is skipped: it would cost
    a rebalance for little.
    """
    held = stabilize(plan, config, now)
    if not held.fresh or plan.desired >= plan.current:
        return held
    s, current = plan.signals, plan.current
    hold = config.hold_s(s)
    target = held.desired
    since = held.state.observed_since
    if (
        target > plan.desired
        and hold < config.scale_down_window_s
        and since is not None
        and now - since >= hold
        and not _rising(plan, config)
        and _queue_calm(plan)
    ):
        recent = max(n for t, n in held.state.recommendations if now - t < hold)
        fast = max(plan.desired, min(current, recent))
        if fast < target and fast <= config.scale_down_confident_share * current:
            target = fast
            held = held.with_(
                desired=target,
                reason=Reason(
                    "scale_down_confident",
                    f"forecast not rising and {hold:.0f} s of recommendations <= {recent}: "
                    f"down to {target}",
                    {"held_s": hold, "highest_recent": recent},
                ),
            )
    if target >= current:
        return held
    last = held.state.last_scale_down_at
    if last is not None and now - last < hold:
        return held.with_(
            desired=current,
            reason=Reason(
                "scale_down_paced",
                f"last scale-down {now - last:.0f} s ago: one per {hold:.0f} s",
                {"since_last_s": now - last, "hold_s": hold},
            ),
        )
    step = max(1, math.ceil(config.scale_down_min_step_share * current - 1e-9))
    if current - target < step:
        return held.with_(
            desired=current,
            reason=Reason(
                "scale_down_not_worth_rebalance",
                f"scale-down by {current - target} < step {step}: not worth a rebalance",
                {"wanted": target, "step": step},
            ),
        )
    state = dataclasses.replace(held.state, last_scale_down_at=now)
    return dataclasses.replace(held, state=state)

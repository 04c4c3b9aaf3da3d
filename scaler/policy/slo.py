"""The SLO policy: size from arrival, forecast and backlog; hold when the engine is the bottleneck.

Steps, in order (each a small pure function of a Plan):
raw desired → forecast → backlog drain → queue breach → engine-bound hold → scale-up step;
the pipeline then applies bounds, partition cap, warm floor, rebalance-aware stabilization
(`rebalance.py`) and the budget.
"""

from __future__ import annotations

import dataclasses
import math

from scaler.forecast import holt
from scaler.policy.pipeline import Pipeline
from scaler.policy.plan import Plan, direction
from scaler.policy.rebalance import queue_budget_ms, scale_up_step, stabilize_rebalance_aware
from scaler.signals import GroupSignals, GroupState, PolicyConfig, Reason

_EPS = 1e-9


def _capacity_replicas(s: GroupSignals) -> int:
    """Replicas that will consume once started: extra ones beyond partitions idle."""
    return min(s.replicas, s.partitions)


def _needed(rps: float, per_replica_rps: float, utilization: float) -> int:
    """Replicas that carry `rps` at the target utilization."""
    return math.ceil(rps / (per_replica_rps * utilization) - _EPS)


def raw_desired(s: GroupSignals, state: GroupState, config: PolicyConfig, now: float) -> Plan:
    """Arrival rate over per-replica throughput at the target utilization, with a band."""
    plan = Plan(signals=s, state=state, desired=s.replicas, diagnosis="steady")
    lam, mu = s.arrival_rps, s.service_rps_per_replica
    if lam is None:
        return plan.with_(
            reason=Reason("arrival_unknown", "arrival rate not measured: holding", {})
        )
    if lam <= 0 and not s.lag:
        return plan.with_(
            desired=0,
            diagnosis="idle" if s.replicas > 0 else "steady",
            reason=Reason("idle", "no arrivals and no lag", {"arrival_rps": 0.0}),
        )
    if mu is None or mu <= 0:
        return _from_utilization(plan, config)
    capacity = _capacity_replicas(s)
    projected = lam / (mu * capacity) if capacity else math.inf
    needed = _needed(lam, mu, config.target_utilization)
    numbers = {
        "arrival_rps": lam,
        "service_rps_per_replica": mu,
        "projected_utilization": projected,
        "target_utilization": config.target_utilization,
        "needed": needed,
    }
    if abs(projected - config.target_utilization) <= config.utilization_band:
        return plan.with_(
            reason=Reason(
                "within_band",
                f"arrival {lam:.0f}/s at {mu:.0f}/s per replica puts {capacity} at "
                f"{projected:.0%}, within {config.target_utilization:.0%}"
                f"±{config.utilization_band:.0%}",
                numbers,
            )
        )
    return plan.with_(
        desired=needed,
        diagnosis=direction(needed, s.replicas),
        reason=Reason(
            "arrival",
            f"arrival {lam:.0f}/s needs {needed} at {mu:.0f}/s per replica "
            f"and {config.target_utilization:.0%} utilization",
            numbers,
        ),
    )


def _from_utilization(plan: Plan, config: PolicyConfig) -> Plan:
    """No throughput measured yet: fall back to the utilization ratio, never below current."""
    s = plan.signals
    if s.utilization is None or s.ready_replicas == 0:
        return plan.with_(
            reason=Reason("throughput_unknown", "per-replica throughput not measured: holding", {})
        )
    wanted = math.ceil(s.ready_replicas * s.utilization / config.target_utilization - _EPS)
    desired = max(wanted, s.replicas)
    return plan.with_(
        desired=desired,
        diagnosis=direction(desired, s.replicas),
        reason=Reason(
            "utilization",
            f"throughput unknown; utilization {s.utilization:.0%} on {s.ready_replicas} ready "
            f"needs {wanted}",
            {"utilization": s.utilization, "needed": wanted},
        ),
    )


def forecast(plan: Plan, config: PolicyConfig) -> Plan:
    """Start replicas one time-to-ready early when arrivals are forecast to rise."""
    s = plan.signals
    mu, lam = s.service_rps_per_replica, s.arrival_rps
    if mu is None or mu <= 0 or lam is None or plan.diagnosis == "idle":
        return plan
    horizon = config.horizon_s(s)
    samples = (*plan.state.arrival_samples, (s.collected_at, lam))
    fc = holt(samples, horizon, config.forecast_alpha, config.forecast_beta)
    if fc is None or fc.value <= lam:
        return plan
    capacity = _capacity_replicas(s)
    projected = fc.value / (mu * capacity) if capacity else math.inf
    needed = _needed(fc.value, mu, config.target_utilization)
    if projected <= config.target_utilization + config.utilization_band or needed <= plan.desired:
        return plan
    return plan.with_(
        desired=needed,
        diagnosis="capacity_bound",
        reason=Reason(
            "forecast",
            f"arrival {lam:.0f}/s forecast {fc.value:.0f}/s in {horizon:.0f} s",
            {
                "arrival_rps": lam,
                "forecast_rps": fc.value,
                "horizon_s": horizon,
                "trend_rps_per_s": fc.trend_per_s,
                "needed": needed,
            },
        ),
    )


def backlog(plan: Plan, config: PolicyConfig) -> Plan:
    """Add what drains the lag beyond what Little's law allows at the SLO."""
    s = plan.signals
    mu, lam, lag = s.service_rps_per_replica, s.arrival_rps, s.lag
    if mu is None or mu <= 0 or lam is None or not lag:
        return plan
    budget_s = queue_budget_ms(s) / 1000
    allowed = lam * budget_s
    excess = lag - allowed
    if excess <= 0:
        return plan
    # New replicas serve only after time-to-ready; until then the lag keeps growing at
    # what the ready replicas cannot take. Size to drain the lag projected at that time
    # within `backlog_drain_s` (capacity already starting was sized for it on earlier ticks).
    ttr = config.time_to_ready_s(s)
    short_rps = max(0.0, lam - mu * min(s.ready_replicas, s.partitions))
    growth = short_rps * ttr if s.starting_replicas == 0 else 0.0
    projected = excess + growth
    drain_s = config.backlog_drain_s
    lam_plan = max(lam, _forecast_rps(plan))
    needed = math.ceil(
        lam_plan / (mu * config.target_utilization) + projected / (mu * drain_s) - _EPS
    )
    raised = needed > plan.desired
    return plan.with_(
        desired=max(needed, plan.desired),
        diagnosis="backlog" if raised else None,
        reason=Reason(
            "backlog",
            f"lag {lag} > {allowed:.0f} the SLO allows, {projected:.0f} by ready in {ttr:.0f} s: "
            f"drain in {drain_s:.0f} s",
            {
                "lag": lag,
                "allowed_lag": allowed,
                "projected_excess": projected,
                "drain_s": drain_s,
                "needed": needed,
            },
        ),
    )


def _forecast_rps(plan: Plan) -> float:
    return next((r.numbers["forecast_rps"] for r in plan.reasons if r.code == "forecast"), 0.0)


def _engine_bound(s: GroupSignals, config: PolicyConfig) -> bool:
    """The e2e SLO is breached but queue wait is a small share and replicas are not busy."""
    if s.e2e_p99_ms is None or s.queue_p99_ms is None:
        return False
    if s.e2e_p99_ms <= s.slo_p99_e2e_ms:
        return False
    queue_small = s.queue_p99_ms <= config.engine_bound_queue_share * s.e2e_p99_ms
    not_busy = s.utilization is None or (
        s.utilization < config.target_utilization + config.utilization_band
    )
    return queue_small and not_busy


def queue_breach(plan: Plan, config: PolicyConfig) -> Plan:
    """Queue p99 over the budget the SLO leaves: grow by at least one even if rates look fine."""
    s = plan.signals
    if s.queue_p99_ms is None or _engine_bound(s, config):
        return plan
    budget = queue_budget_ms(s)
    if s.queue_p99_ms <= budget:
        return plan
    if s.oldest_age_ms is not None and s.oldest_age_ms <= budget:
        # The window's p99 remembers a spike (a rebalance pause, a burst already drained) but
        # nothing waits too long now: adding a replica would only cause another rebalance.
        return plan
    reason = Reason(
        "queue_breach",
        f"queue p99 {s.queue_p99_ms:.0f} ms > budget {budget:.0f} ms",
        {"queue_p99_ms": s.queue_p99_ms, "queue_budget_ms": budget},
    )
    if plan.desired > s.replicas:
        # Put the breach first: it is why a person should care about this decision.
        return dataclasses.replace(plan, reasons=(reason, *plan.reasons))
    if s.starting_replicas > 0:
        # Capacity is already on its way; adding one per tick while it warms would overshoot.
        return plan.with_(desired=max(plan.desired, s.replicas), reason=reason)
    return plan.with_(desired=s.replicas + 1, diagnosis="capacity_bound", reason=reason)


def engine_hold(plan: Plan, config: PolicyConfig) -> Plan:
    """When the breach is engine time, not queue wait, more replicas cannot help: say so, hold."""
    s = plan.signals
    if not _engine_bound(s, config):
        return plan
    assert s.e2e_p99_ms is not None and s.queue_p99_ms is not None  # checked by _engine_bound
    numbers = {
        "e2e_p99_ms": s.e2e_p99_ms,
        "slo_p99_e2e_ms": s.slo_p99_e2e_ms,
        "queue_p99_ms": s.queue_p99_ms,
        "engine_p99_ms": s.engine_p99_ms if s.engine_p99_ms is not None else math.nan,
        "utilization": s.utilization if s.utilization is not None else math.nan,
    }
    util = f", utilization {s.utilization:.0%}" if s.utilization is not None else ""
    return plan.with_(
        desired=max(plan.desired, s.replicas),
        diagnosis="engine_bound",
        reason=Reason(
            "engine_bound",
            f"e2e p99 {s.e2e_p99_ms:.0f} ms > SLO {s.slo_p99_e2e_ms:.0f} ms but queue p99 "
            f"{s.queue_p99_ms:.0f} ms{util}: engine time, more replicas would not help",
            numbers,
        ),
    )


def settle(plan: Plan, by_rate: int, config: PolicyConfig, now: float) -> Plan:
    """Just after a scale-down, a lag the rebalance pause explains adds nobody.

    Every membership change pauses the whole group (eager rebalance): requests queue for
    its length, then drain. After a scale-down, adding replicas back for that lag starts
    another pause, and another (live runs flapped 8→1→2→3→4 on a load one replica
    serves): hold what the arrival rate asks for until the group settles, unless the lag
    is more than the pause can explain. After a scale-up nothing is held: a rising load
    is what a backlog then means, and the starting replicas are already counted.
    """
    s, state = plan.signals, plan.state
    changed = state.last_scale_down_at
    if changed is None or config.rebalance_settle_s <= 0:
        return plan
    since = now - changed
    floor = max(by_rate, s.replicas)
    if since >= config.rebalance_settle_s or plan.desired <= floor:
        return plan
    lam = s.arrival_rps or 0.0
    explained = lam * (config.rebalance_settle_s + queue_budget_ms(s) / 1000)
    lag = s.lag or 0
    if lag > explained:
        return plan
    return plan.with_(
        desired=floor,
        diagnosis="steady",
        reason=Reason(
            "settling",
            f"scaled down {since:.0f} s ago: lag {lag} is within the {explained:.0f} a "
            f"rebalance pause explains; holding {floor} until the group settles",
            {"since_change_s": since, "lag": lag, "explained_lag": explained},
        ),
    )


def size(s: GroupSignals, state: GroupState, config: PolicyConfig, now: float) -> Plan:
    """The SLO policy's sizing, composed of the named steps above."""
    plan = raw_desired(s, state, config, now)
    plan = forecast(plan, config)
    by_rate = plan.desired
    plan = backlog(plan, config)
    plan = queue_breach(plan, config)
    plan = settle(plan, by_rate, config, now)
    plan = engine_hold(plan, config)
    return scale_up_step(plan, config)


decide = Pipeline(
    name="slo",
    size=size,
    warm_floor=True,
    partition_cap=True,
    global_budget=True,
    stabilizer=stabilize_rebalance_aware,
)
"""`decide(signals, state, config, now) -> (Decision, ScalerState)` for the SLO policy."""

"""The SLO policy: size from arrival, forecast and backlog; hold when the engine is the bottleneck.

Steps, in order (each a small pure function of a Plan):
learn the safe utilization (`headroom.py`) → raw desired → forecast → fast path (`fast.py`)
→ backlog drain → queue breach → settle → burst hold and standby (`hold.py`) → engine-bound
hold → scale-up step; the pipeline then applies bounds, partition cap, warm floor,
scale-down stabilization (`rebalance.py`) and the budget.
"""

from __future__ import annotations

import dataclasses
import math

from scaler.config import PolicyConfig
from scaler.decision import Reason, reason_amount, reason_number, reason_percent
from scaler.policy.bursts import BurstMemory
from scaler.policy.cap_hold import cap_hold
from scaler.policy.counts import ceil_count
from scaler.policy.fast import fast_path
from scaler.policy.headroom import learn, load_spare, replicas_for
from scaler.policy.hold import burst_due, burst_hold, burst_memory, burst_rise, forecast_cap_load
from scaler.policy.pipeline import Pipeline
from scaler.policy.plan import Plan, direction, known_numbers
from scaler.policy.rate import arrival_estimate
from scaler.policy.rebalance import (
    QUEUE_BUDGET_FLOOR_SHARE,
    engine_part_ms,
    queue_budget_ms,
    scale_up_step,
)
from scaler.policy.scale_down import stabilize_slo
from scaler.policy.shares import even_shares
from scaler.signals import GroupSignals, GroupState

_EPS = 1e-9


def _capacity_replicas(s: GroupSignals) -> int:
    """Replicas that will consume once started: extra ones beyond partitions idle."""
    return min(s.replicas, s.partitions)


_SAY_READ_SHARE = 0.1
"""A rate read from the samples that differs from the last window by more than this share
names both."""


def _needed(rps: float, per_replica_rps: float, state: GroupState, config: PolicyConfig) -> int:
    """Replicas that carry `rps` with the spare (`headroom.py`)."""
    return replicas_for(rps / per_replica_rps, state, config)


def raw_desired(plan: Plan, config: PolicyConfig) -> Plan:
    """Arrival rate over per-replica throughput at the safe utilization, with a band."""
    s = plan.signals
    lam, mu = s.arrival_rps, s.service_rps_per_replica
    if lam is None:
        return plan.with_(
            reason=Reason(
                "arrival_unknown",
                "arrival rate not measured: no size from it",
                known_numbers(s),
            )
        )
    rate = arrival_estimate(plan, config)
    measured = lam
    lam = lam if rate is None else rate.level
    # The rate sized for is read from the last minute's samples; say so where it is not
    # what the last window measured, so a reader can tell the two apart.
    read = (
        f" (read from {reason_number(config.forecast_window_s)} s of samples; the last window "
        f"measured {reason_number(measured)}/s)"
        if abs(lam - measured) > _SAY_READ_SHARE * max(measured, 1.0)
        else ""
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
    spare = load_spare(lam / mu, plan.state, config)
    needed = _needed(lam, mu, plan.state, config)
    numbers = {
        "arrival_rps": lam,
        "service_rps_per_replica": mu,
        "busy_replicas": lam / mu,
        "spare_replicas": spare,
        "needed": needed,
    }
    # One replica of hysteresis on the way down: a step that small is mostly noise.
    if needed <= capacity <= needed + 1:
        return plan.with_(
            reason=Reason(
                "within_band",
                f"arrival {reason_amount(lam)}/s{read} at {reason_amount(mu)}/s per replica is "
                f"{_sizing(lam / mu, spare, needed, config)}, "
                f"{reason_number(capacity)} within one",
                numbers,
            )
        )
    return plan.with_(
        desired=needed,
        diagnosis=direction(needed, s.replicas),
        reason=Reason(
            "arrival",
            f"arrival {reason_amount(lam)}/s{read} at {reason_amount(mu)}/s per replica is "
            f"{_sizing(lam / mu, spare, needed, config)}",
            numbers,
        ),
    )


def _sizing(busy: float, spare: float, needed: int, config: PolicyConfig) -> str:
    """`busy + spare: needed`, naming the utilization ceiling where it, not the spare, set
    the count (`headroom.replicas_for`: 40 busy + 4 spare is 44, but 80 % busy is 50)."""
    by_spare = ceil_count(busy + spare - _EPS)
    text = f"{reason_amount(busy)} busy + {reason_amount(spare)} spare: "
    if needed <= by_spare:
        return text + reason_number(needed)
    ceiling = config.target_utilization + config.utilization_band
    return f"{text}{reason_number(by_spare)}, at most {reason_percent(ceiling)} busy: " + (
        reason_number(needed)
    )


def _from_utilization(plan: Plan, config: PolicyConfig) -> Plan:
    """No throughput measured yet: fall back to the utilization ratio, never below current.

    A group scaled to zero measures nothing: with arrivals or lag it starts one replica
    (held at zero, its requests would wait for good)."""
    s = plan.signals
    if s.replicas == 0:
        lam, lag = s.arrival_rps or 0.0, s.lag or 0
        return plan.with_(
            desired=1,
            diagnosis="capacity_bound",
            reason=Reason(
                "scale_from_zero",
                f"arrival {reason_amount(lam)}/s, lag {reason_number(lag)} and no replica: start "
                "one (its throughput is measured once it serves)",
                {"arrival_rps": lam, "lag": float(lag)},
            ),
        )
    if s.utilization is None or s.ready_replicas == 0:
        return plan.with_(
            reason=Reason(
                "throughput_unknown",
                "per-replica throughput not measured, nor the utilization of a ready replica: "
                "no size from them",
                known_numbers(s),
            )
        )
    wanted = replicas_for(s.ready_replicas * s.utilization, plan.state, config)
    desired = max(wanted, s.replicas)
    return plan.with_(
        desired=desired,
        diagnosis=direction(desired, s.replicas),
        reason=Reason(
            "utilization",
            f"throughput unknown; utilization {s.utilization:.0%} on "
            f"{reason_number(s.ready_replicas)} ready needs {reason_number(wanted)}",
            {"utilization": s.utilization, "needed": wanted},
        ),
    )


def forecast(plan: Plan, config: PolicyConfig, memory: BurstMemory | None) -> Plan:
    """Start replicas one time-to-ready early when arrivals are clearly rising."""
    s = plan.signals
    mu, lam = s.service_rps_per_replica, s.arrival_rps
    rate = arrival_estimate(plan, config)
    if mu is None or mu <= 0 or lam is None or rate is None or plan.diagnosis == "idle":
        return plan
    if rate.kind != "trend" or rate.trend_per_s <= 0:
        return plan
    horizon = config.horizon_s(s)
    ahead = rate.ahead
    cap = forecast_cap_load(memory, config)
    if cap is not None and ahead > cap * mu:
        ahead = cap * mu
    needed = _needed(ahead, mu, plan.state, config)
    if needed <= plan.desired:
        return plan
    return plan.with_(
        desired=needed,
        diagnosis="capacity_bound",
        reason=Reason(
            "forecast",
            f"arrival {reason_number(rate.level)}/s rising {reason_number(rate.trend_per_s, 1)}/s "
            f"(±{reason_number(rate.trend_stderr_per_s, 1)}): {reason_number(rate.ahead)}/s in "
            f"{reason_number(horizon)} s"
            + (
                f", at most the remembered bursts' p{config.burst_peak_quantile * 100:.0f} "
                f"peak {reason_number(ahead)}/s"
                if ahead < rate.ahead
                else ""
            ),
            {
                "arrival_rps": rate.level,
                "forecast_rps": ahead,
                "horizon_s": horizon,
                "trend_rps_per_s": rate.trend_per_s,
                "trend_stderr_rps_per_s": rate.trend_stderr_per_s,
                "needed": needed,
            },
        ),
    )


def backlog(plan: Plan, config: PolicyConfig) -> Plan:
    """Add what drains the lag beyond what Little's law allows at the SLO."""
    s = plan.signals
    mu, lam, lag = s.service_rps_per_replica, s.arrival_rps, s.lag
    if mu is None or mu <= 0 or not lag:
        return plan
    if lam is None:
        return _backlog_unmeasured_arrival(plan, lag, mu, config)
    budget_s = queue_budget_ms(s) / 1000
    allowed = lam * budget_s
    excess = lag - allowed
    if excess <= 0 or (allowed < 1 and _in_flight(s, lag, mu, budget_s)):
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
    needed = _needed(lam_plan, mu, plan.state, config) + ceil_count(
        projected / (mu * drain_s) - _EPS
    )
    # A group short of capacity for its arrivals stays capacity_bound; "backlog" is for the
    # lag alone asking for more than there is (a lag that only slows a scale-down is no
    # backlog diagnosis: 4→3 said "backlog").
    raised = needed > max(plan.desired, s.replicas) and plan.diagnosis != "capacity_bound"
    return plan.with_(
        desired=max(needed, plan.desired),
        diagnosis="backlog" if raised else None,
        reason=Reason(
            "backlog",
            f"lag {reason_number(lag)} > {reason_amount(allowed)} the SLO allows, "
            f"{reason_amount(projected)} by ready in {reason_number(ttr)} s: "
            f"drain in {reason_number(drain_s)} s",
            {
                "lag": lag,
                "allowed_lag": allowed,
                "projected_excess": projected,
                "drain_s": drain_s,
                "needed": needed,
            },
        ),
    )


def _in_flight(s: GroupSignals, lag: int, mu: float, budget_s: float) -> bool:
    """A lag whose oldest request is within the queue budget and that the ready replicas
    clear within it is in flight, not late. Asked only where Little's law allows less than
    one request: at a trickle (0.3/s × 0.35 s) one request being served asked for a
    replica more on every tick it was seen (`scaler decide` on the trickle example with
    lag 1, 3 ms old).

    Not at higher rates: there a lag past the law is the first sign of a burst before its
    oldest request is late, and waiting for that cost attainment (on 142 simulator cells
    0.05 points on average, up to 0.75; docs/benchmarks.md, "Stop 44")."""
    if s.oldest_age_ms is None or s.oldest_age_ms > budget_s * 1000:
        return False
    return lag <= mu * min(s.ready_replicas, s.partitions) * budget_s


def _backlog_unmeasured_arrival(plan: Plan, lag: int, mu: float, config: PolicyConfig) -> Plan:
    """No arrival rate yet (the scaler's first tick, a broker that started over) but a
    backlog whose oldest request waits past the queue budget (of unknown age: more than the
    ready replicas clear within it): drain it in `backlog_drain_s` on top of the replicas
    there are, which are taken to keep up with what arrives. A backlog that waits no longer
    than the budget asks for nothing."""
    s = plan.signals
    budget = queue_budget_ms(s)
    if s.oldest_age_ms is not None and s.oldest_age_ms <= budget:
        return plan
    # Of unknown age, a lag the ready replicas clear within the budget is in flight, not late.
    drains_in_budget = mu * min(s.ready_replicas, s.partitions) * budget / 1000
    if s.oldest_age_ms is None and lag <= drains_in_budget:
        return plan
    if s.starting_replicas > 0:  # capacity is on its way; the rate is measured by then
        return plan
    drain_s = config.backlog_drain_s
    needed = s.replicas + ceil_count(lag / (mu * drain_s) - _EPS)
    if needed <= plan.desired:
        return plan
    waited = (
        f", the oldest waiting {reason_number(s.oldest_age_ms)} ms > {reason_number(budget)} ms"
        if s.oldest_age_ms is not None
        else ""
    )
    return plan.with_(
        desired=needed,
        diagnosis="backlog",
        reason=Reason(
            "backlog",
            f"lag {reason_number(lag)}{waited}: drain it in "
            f"{reason_number(drain_s)} s at {reason_amount(mu)}/s per replica beside the "
            f"{reason_number(s.replicas)} there are",
            {"lag": lag, "queue_budget_ms": budget, "drain_s": drain_s, "needed": needed},
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
    engine = engine_part_ms(s)
    floor = (
        f" (the {QUEUE_BUDGET_FLOOR_SHARE:.0%} floor: the engine's {reason_number(engine)} ms "
        "of the e2e p99 leaves less)"
        if s.slo_p99_e2e_ms - engine < budget
        else ""
    )
    reason = Reason(
        "queue_breach",
        f"queue p99 {reason_number(s.queue_p99_ms)} ms > budget {reason_number(budget)} ms{floor}",
        {"queue_p99_ms": s.queue_p99_ms, "queue_budget_ms": budget, "engine_in_e2e_p99_ms": engine},
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
        return _engine_over_slo(plan)
    assert s.e2e_p99_ms is not None and s.queue_p99_ms is not None  # checked by _engine_bound
    numbers = {
        "e2e_p99_ms": s.e2e_p99_ms,
        "slo_p99_e2e_ms": s.slo_p99_e2e_ms,
        "queue_p99_ms": s.queue_p99_ms,
        "engine_p99_ms": s.engine_p99_ms if s.engine_p99_ms is not None else math.nan,
        "utilization": s.utilization if s.utilization is not None else math.nan,
    }
    util = f", utilization {s.utilization:.0%}" if s.utilization is not None else ""
    where = "engine time"
    if s.engine_p99_ms is not None and s.queue_p99_ms + s.engine_p99_ms < s.e2e_p99_ms / 2:
        # Neither explains it: a stalled broker or ingest (seen after a broker freeze, read
        # as "engine time" with an engine p99 of 5 ms).
        where = (
            f"engine p99 {reason_number(s.engine_p99_ms)} ms: the time is spent before the queue "
            "(ingest, the broker's hops)"
        )
    return plan.with_(
        desired=s.replicas,
        diagnosis="engine_bound",
        reason=Reason(
            "engine_bound",
            f"e2e p99 {reason_number(s.e2e_p99_ms)} ms > SLO {reason_number(s.slo_p99_e2e_ms)} ms "
            f"but queue p99 {reason_number(s.queue_p99_ms)} ms{util}: {where}, more replicas "
            "would not help",
            numbers,
        ),
    )


def _engine_over_slo(plan: Plan) -> Plan:
    """A busy group whose engine p99 alone is over the SLO: the sizing stands (fewer
    requests a replica make smaller batches), but say that no replica count meets it."""
    s = plan.signals
    if s.engine_p99_ms is None or s.engine_p99_ms <= s.slo_p99_e2e_ms:
        return plan
    return dataclasses.replace(
        plan,
        reasons=(
            *plan.reasons,
            Reason(
                "engine_over_slo",
                f"engine p99 {reason_number(s.engine_p99_ms)} ms alone is over the SLO "
                f"{reason_number(s.slo_p99_e2e_ms)} ms: more replicas shrink batches, but no count "
                "meets the SLO while the engine is this slow",
                {"engine_p99_ms": s.engine_p99_ms, "slo_p99_e2e_ms": s.slo_p99_e2e_ms},
            ),
        ),
    )


def settle(plan: Plan, by_rate: int, config: PolicyConfig, now: float) -> Plan:
    """Just after a scale-down, a lag the rebalance pause explains adds nobody.

    A membership change pauses the partitions it moves (all of them under an eager
    rebalance): their requests queue for the pause, then drain. After a scale-down,
    adding replicas back for that lag starts another pause, and another (live runs with
    eager rebalances flapped 8→1→2→3→4 on a load one replica serves): hold what the
    arrival rate asks for until the group settles, unless the lag is more than the pause
    can explain. After a scale-up nothing is held: a rising load is what a backlog then
    means, and the starting replicas are already counted.
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
            f"scaled down {reason_number(since)} s ago: lag {reason_number(lag)} is within the "
            f"{reason_number(explained)} a rebalance pause explains; holding "
            f"{reason_number(floor)} until the group settles",
            {"since_change_s": since, "lag": lag, "explained_lag": explained},
        ),
    )


def not_while_rising(plan: Plan, config: PolicyConfig) -> Plan:
    """No scale-down while arrivals rise or a request waits longer than the queue budget."""
    s = plan.signals
    if plan.desired >= s.replicas:
        return plan
    rate = arrival_estimate(plan, config)
    # Below the gap line between slow-rising bursts, a step up the rate still reports is the
    # last burst's onset, not a rise now (`hold.release_to_floor`).
    rising = rate is not None and rate.rising() and not plan.release_to_floor
    budget = queue_budget_ms(s)
    waiting = s.oldest_age_ms is not None and s.oldest_age_ms > budget
    if not rising and not waiting:
        return plan
    why = (
        "arrivals rising"
        if rising
        else f"oldest request {reason_number(s.oldest_age_ms or 0.0)} ms > "
        f"{reason_number(budget)} ms"
    )
    return plan.with_(
        desired=s.replicas,
        reason=Reason(
            "not_while_rising",
            f"scale-down to {reason_number(plan.desired)} waits: {why}",
            {"wanted": plan.desired, "queue_budget_ms": budget},
        ),
    )


def size(s: GroupSignals, state: GroupState, config: PolicyConfig, now: float) -> Plan:
    """The SLO policy's sizing, composed of the named steps above."""
    plan = Plan(signals=s, state=state, desired=s.replicas, diagnosis="steady")
    plan = learn(plan, config, now)
    memory = burst_memory(plan, config)
    plan = raw_desired(plan, config)
    plan = forecast(plan, config, memory)
    by_rate = plan.desired
    plan = fast_path(plan, config)
    plan = backlog(plan, config)
    plan = queue_breach(plan, config)
    plan = settle(plan, by_rate, config, now)
    plan = burst_rise(plan, config, memory)
    plan = burst_hold(plan, config, memory)
    plan = burst_due(plan, config, memory)
    plan = cap_hold(plan, config, memory)
    plan = not_while_rising(plan, config)
    plan = engine_hold(plan, config)
    return even_shares(scale_up_step(plan, config), config)


decide = Pipeline(
    name="slo",
    size=size,
    warm_floor=True,
    partition_cap=True,
    global_budget=True,
    stabilizer=stabilize_slo,
)
"""`decide(signals, state, config, now) -> (Decision, ScalerState)` for the SLO policy."""

"""Steps every policy shares: stale-signal safety, replica bounds and scale-down stabilization."""

from __future__ import annotations

import dataclasses

from scaler.config import PolicyConfig
from scaler.decision import Reason, reason_number
from scaler.policy.plan import Plan
from scaler.signals import GroupSignals, GroupState


def is_stale(signals: GroupSignals, config: PolicyConfig, now: float) -> bool:
    """True when the collector flagged the snapshot or it is older than `stale_after_s`."""
    return signals.stale or now - signals.collected_at > config.stale_after_s


def blind(signals: GroupSignals, state: GroupState, config: PolicyConfig, now: float) -> Plan:
    """A group without fresh signals: hold, and after N failures raise to the fallback count."""
    failed = state.failed_collections + 1
    age_s = now - signals.collected_at
    why = (
        f"signals {reason_number(age_s)} s old"
        if age_s > config.stale_after_s
        else "signals flagged stale by the collector (a feed it could not read)"
    )
    stale = Reason(
        "stale_signals",
        f"{why} ({failed} failed collection(s)): not scaling down on missing data",
        {"age_s": age_s, "failed_collections": failed},
    )
    plan = Plan(
        signals=signals,
        state=state,
        desired=signals.replicas,
        diagnosis="stale_signals",
        reasons=(stale,),
        standby=signals.standby_replicas or 0,
        fresh=False,
    )
    if failed < config.failed_collections_before_fallback:
        return plan
    # Raise to the fallback but never lower: a blind scaler must not remove capacity
    # (KEDA's `currentReplicasIfHigher` fallback behaviour).
    target = max(signals.replicas, config.fallback_replicas)
    return plan.with_(
        desired=target,
        diagnosis="fallback",
        reason=Reason(
            "fallback",
            f"{failed} failed collections >= {config.failed_collections_before_fallback}: "
            f"fallback to {config.fallback_replicas}",
            {"failed_collections": failed, "fallback_replicas": config.fallback_replicas},
        ),
    )


def apply_bounds(plan: Plan, *, warm_floor: bool, partition_cap: bool) -> Plan:
    """Clamp to min (and the warm floor), max, and the topic's partitions, saying which bit."""
    s = plan.signals
    floor = max(s.min_replicas, s.warm_replicas if warm_floor else 0)
    desired = plan.desired
    if desired < floor:
        plan = plan.with_(
            desired=floor,
            reason=Reason(
                "floor",
                f"kept at floor {reason_number(floor)} (min {reason_number(s.min_replicas)}, "
                f"warm {reason_number(s.warm_replicas)})",
                {"floor": floor, "wanted": desired},
            ),
        )
    return apply_caps(plan, partition_cap=partition_cap)


def apply_caps(plan: Plan, *, partition_cap: bool) -> Plan:
    """Clamp to max and the topic's partitions, saying which."""
    s = plan.signals
    if s.max_replicas is not None and plan.desired > s.max_replicas:
        plan = plan.with_(
            desired=s.max_replicas,
            reason=Reason(
                "max_capped",
                f"capped at max {reason_number(s.max_replicas)} "
                f"(wanted {reason_number(plan.desired)})",
                {"max_replicas": s.max_replicas, "wanted": plan.desired},
            ),
        )
    if partition_cap and plan.desired > s.partitions:
        # A consumer group cannot use more consumers than partitions: extras would idle.
        plan = plan.with_(
            desired=s.partitions,
            diagnosis="partition_capped",
            reason=Reason(
                "partition_capped",
                f"capped at {reason_number(s.partitions)} partitions "
                f"(wanted {reason_number(plan.desired)})",
                {"partitions": s.partitions, "wanted": plan.desired},
            ),
        )
    return plan


def group_cap(s: GroupSignals) -> int:
    """The most consumers a group can use: its partitions, or `max_replicas` if lower."""
    return min(s.partitions, s.max_replicas if s.max_replicas is not None else s.partitions)


def cap_standby(plan: Plan) -> Plan:
    """A standby is only worth its cost if it can consume once promoted: cap at the room left."""
    room = max(0, group_cap(plan.signals) - plan.desired)
    if plan.standby <= room:
        return plan
    return dataclasses.replace(plan, standby=room)


def stabilize(plan: Plan, config: PolicyConfig, now: float) -> Plan:
    """HPA-style: scale up at once; scale down only to the max recommendation in the window."""
    if not plan.fresh:
        return plan
    kept = (r for r in plan.state.recommendations if now - r[0] < config.scale_down_window_s)
    window = (*kept, (now, plan.desired))
    plan = dataclasses.replace(plan, state=dataclasses.replace(plan.state, recommendations=window))
    if plan.desired >= plan.current:
        return plan
    since = plan.state.observed_since
    if since is None or now - since < config.scale_down_window_s:
        # Without a full window of history (a fresh scaler, a restart) a scale-down could
        # be the first sample of a dip; wait until the window has been observed.
        return plan.with_(
            desired=plan.current,
            reason=Reason(
                "scale_down_waits_for_history",
                f"scale-down to {reason_number(plan.desired)} waits for "
                f"{reason_number(config.scale_down_window_s)} s "
                "of history",
                {"wanted": plan.desired, "window_s": config.scale_down_window_s},
            ),
        )
    held = min(plan.current, max(n for _, n in window))
    if held == plan.desired:
        return plan
    return plan.with_(
        desired=held,
        reason=Reason(
            "scale_down_stabilized",
            f"scale-down to {reason_number(plan.desired)} held at {reason_number(held)} "
            f"(highest recommendation in {reason_number(config.scale_down_window_s)} s)",
            {"wanted": plan.desired, "held": held, "window_s": config.scale_down_window_s},
        ),
    )

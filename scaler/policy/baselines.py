"""Baselines with the policy interface: KEDA's Kafka lag scaler and HPA on utilization.

Both follow the HPA controller's rules: a 10% tolerance around the target ratio and a
scale-down stabilization window (300 s by default). Not modelled: HPA's default scale-up
rate limit (100% or 4 pods per 15 s); leaving it out can only help the baselines.
"""

from __future__ import annotations

from scaler.config import PolicyConfig
from scaler.decision import Reason, reason_amount, reason_number, reason_percent
from scaler.policy.counts import ceil_count
from scaler.policy.pipeline import Pipeline
from scaler.policy.plan import Plan, direction, known_numbers
from scaler.signals import GroupSignals, GroupState

_EPS = 1e-9


def _hpa_replicas(plan: Plan, ratio: float, config: PolicyConfig, base: int) -> Plan:
    """HPA's rule: no change within tolerance, else ceil(base * ratio)."""
    s = plan.signals
    if abs(ratio - 1.0) <= config.hpa_tolerance:
        return plan.with_(
            reason=Reason(
                "within_tolerance",
                f"ratio {reason_number(ratio, 2)} within ±{reason_percent(config.hpa_tolerance)}",
                {"ratio": ratio},
            )
        )
    desired = ceil_count(base * ratio - _EPS)
    return plan.with_(desired=desired, diagnosis=direction(desired, s.replicas))


def keda_lag(s: GroupSignals, state: GroupState, config: PolicyConfig, now: float) -> Plan:
    """KEDA Kafka scaler: desired = ceil(totalLag / lagThreshold) via HPA AverageValue."""
    plan = Plan(signals=s, state=state, desired=s.replicas, diagnosis="steady")
    if s.lag is None:
        return plan.with_(
            reason=Reason("lag_unknown", "lag not measured: no size from it", known_numbers(s))
        )
    threshold = config.keda_lag_threshold
    numbers = {"lag": float(s.lag), "lag_threshold": threshold}
    if s.lag <= config.keda_activation_lag_threshold:
        # Inactive scaler: KEDA hands the group back to minReplicaCount.
        return plan.with_(
            desired=s.min_replicas,
            diagnosis="idle",
            reason=Reason(
                "inactive",
                f"lag {reason_number(s.lag)} <= activation "
                f"{reason_amount(config.keda_activation_lag_threshold)}",
                numbers,
            ),
        )
    if s.replicas == 0:
        desired = ceil_count(s.lag / threshold - _EPS)
        return plan.with_(
            desired=desired,
            diagnosis="capacity_bound",
            reason=Reason(
                "lag", f"lag {reason_number(s.lag)} / threshold {reason_amount(threshold)}", numbers
            ),
        )
    ratio = s.lag / (threshold * s.replicas)
    plan = _hpa_replicas(plan, ratio, config, s.replicas)
    return plan.with_(
        reason=Reason(
            "lag",
            f"lag {reason_number(s.lag)} over {reason_number(s.replicas)} replicas vs threshold "
            f"{reason_amount(threshold)} per replica",
            {**numbers, "ratio": ratio},
        )
    )


def hpa_util(s: GroupSignals, state: GroupState, config: PolicyConfig, now: float) -> Plan:
    """HPA on utilization: desired = ceil(ready * utilization / target)."""
    plan = Plan(signals=s, state=state, desired=s.replicas, diagnosis="steady")
    if s.utilization is None or s.ready_replicas == 0:
        return plan.with_(
            reason=Reason(
                "utilization_unknown",
                "utilization not measured (or no replica ready): no size from it",
                known_numbers(s),
            )
        )
    ratio = s.utilization / config.target_utilization
    # Pods still starting count as 0% busy, which is what HPA does on scale-up.
    plan = _hpa_replicas(plan, ratio, config, s.ready_replicas)
    return plan.with_(
        reason=Reason(
            "utilization",
            f"utilization {reason_percent(s.utilization)} on {reason_number(s.ready_replicas)} "
            f"ready vs target {reason_percent(config.target_utilization)}",
            {"utilization": s.utilization, "ratio": ratio},
        )
    )


keda_lag_decide = Pipeline(
    name="keda-lag", size=keda_lag, warm_floor=False, partition_cap=True, global_budget=False
)
"""KEDA Kafka scaler semantics, capped at partitions (allowIdleConsumers=false)."""

hpa_util_decide = Pipeline(
    name="hpa-util", size=hpa_util, warm_floor=False, partition_cap=False, global_budget=False
)
"""HPA utilization target; HPA does not know about partitions."""

"""Scaling policies: pure `decide(signals, state, config, now) -> (Decision, ScalerState)`."""

from __future__ import annotations

from scaler.policy.baselines import hpa_util_decide, keda_lag_decide
from scaler.policy.pipeline import PolicyFn
from scaler.policy.slo import decide

POLICIES: dict[str, PolicyFn] = {
    "slo": decide,
    "keda-lag": keda_lag_decide,
    "hpa-util": hpa_util_decide,
}
"""Every policy by its CLI name."""

__all__ = ["POLICIES", "PolicyFn", "decide"]

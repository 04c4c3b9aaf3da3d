"""KEDA Kafka lag scaler and HPA utilization semantics."""

from __future__ import annotations

import dataclasses

import pytest

from scaler.config import PolicyConfig
from scaler.policy import POLICIES
from scaler.signals import ScalerState
from tests.unit.scaler.conftest import FakeClock, make_signals


def _desired(policy: str, now: float = 0.0, **overrides: object) -> int:
    decision, _ = POLICIES[policy](
        [make_signals(**overrides)], ScalerState(), PolicyConfig(keda_lag_threshold=100), now
    )
    return decision.groups[0].desired


@pytest.mark.parametrize(
    ("overrides", "desired"),
    [
        pytest.param({"lag": 1000}, 10, id="ceil-lag-over-threshold"),
        pytest.param({"lag": 1001}, 11, id="ceil-rounds-up"),
        pytest.param({"lag": 420}, 4, id="within-10pct-tolerance"),
        pytest.param({"lag": 5000, "partitions": 12}, 12, id="capped-at-partitions"),
        pytest.param({"lag": 0, "min_replicas": 2}, 4, id="inactive-waits-for-window"),
        pytest.param({"lag": None}, 4, id="unknown-lag-holds"),
        pytest.param({"lag": 50, "replicas": 0, "ready_replicas": 0}, 1, id="from-zero"),
    ],
)
def test_keda_lag(overrides: dict[str, object], desired: int) -> None:
    assert _desired("keda-lag", **overrides) == desired


@pytest.mark.parametrize(
    ("overrides", "desired"),
    [
        pytest.param({"utilization": 0.7}, 4, id="at-target"),
        pytest.param({"utilization": 0.75}, 4, id="within-tolerance"),
        pytest.param({"utilization": 1.0}, 6, id="saturated"),
        pytest.param({"utilization": 1.0, "partitions": 2}, 6, id="no-partition-cap"),
        pytest.param({"utilization": None}, 4, id="unknown-holds"),
    ],
)
def test_hpa_util(overrides: dict[str, object], desired: int) -> None:
    assert _desired("hpa-util", **overrides) == desired


@pytest.mark.parametrize("policy", ["keda-lag", "hpa-util"])
def test_baselines_stabilize_scale_down(policy: str, clock: FakeClock) -> None:
    state = ScalerState()
    config = PolicyConfig(keda_lag_threshold=100)
    quiet = make_signals(replicas=8, ready_replicas=8, lag=100, utilization=0.1)
    desired = []
    for _ in range(80):
        now = clock.tick(5)
        s = dataclasses.replace(quiet, collected_at=now)
        decision, state = POLICIES[policy]([s], state, config, now)
        desired.append((now, decision.groups[0].desired))
    assert all(d == 8 for t, d in desired if t < 300)
    assert any(d < 8 for t, d in desired if t >= 300)

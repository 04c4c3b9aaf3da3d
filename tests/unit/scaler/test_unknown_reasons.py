"""Reasons for what was not measured carry the numbers that were, and never say "holding"
beside a decision that changes the count."""

from __future__ import annotations

from typing import Any

import pytest

from scaler.config import PolicyConfig
from scaler.policy import POLICIES
from scaler.signals import ScalerState
from tests.unit.scaler.conftest import make_signals

RATES = {"arrival_rps": 840.0, "service_rps_per_replica": 300.0}
"""What the baselines do not size from, said all the same."""


@pytest.mark.parametrize(
    ("policy", "change", "code", "numbers"),
    [
        pytest.param(
            "slo",
            {"arrival_rps": None},
            "arrival_unknown",
            {
                "replicas": 4,
                "ready_replicas": 4,
                "starting_replicas": 0,
                "service_rps_per_replica": 300.0,
                "lag": 10,
                "utilization": 0.7,
            },
            id="slo-arrival",
        ),
        pytest.param(
            "slo",
            {
                "replicas": 2,
                "ready_replicas": 0,
                "starting_replicas": 2,
                "service_rps_per_replica": None,
                "utilization": None,
                "lag": 5000,
            },
            "throughput_unknown",
            {
                "replicas": 2,
                "ready_replicas": 0,
                "starting_replicas": 2,
                "arrival_rps": 840.0,
                "lag": 5000,
            },
            id="slo-throughput",
        ),
        pytest.param(
            "keda-lag",
            {"lag": None, "utilization": None},
            "lag_unknown",
            {"replicas": 4, "ready_replicas": 4, "starting_replicas": 0, **RATES},
            id="keda-lag",
        ),
        pytest.param(
            "hpa-util",
            {"utilization": None},
            "utilization_unknown",
            {"replicas": 4, "ready_replicas": 4, "starting_replicas": 0, "lag": 10, **RATES},
            id="hpa-utilization",
        ),
        pytest.param(
            "hpa-util",
            {"replicas": 3, "ready_replicas": 0, "starting_replicas": 3},
            "utilization_unknown",
            {
                "replicas": 3,
                "ready_replicas": 0,
                "starting_replicas": 3,
                "lag": 10,
                "utilization": 0.7,
                **RATES,
            },
            id="hpa-none-ready",
        ),
    ],
)
def test_unknown_reasons_carry_known_numbers(
    policy: str, change: dict[str, Any], code: str, numbers: dict[str, float]
) -> None:
    s = make_signals(**change)
    decision, _ = POLICIES[policy]([s], ScalerState(), PolicyConfig(), 0.0)
    reason = next(r for r in decision.groups[0].reasons if r.code == code)
    assert dict(reason.numbers) == numbers
    assert "holding" not in reason.message


@pytest.mark.parametrize(
    ("policy", "change", "desired"),
    [
        # The queue breach adds one after the rate could size nothing.
        pytest.param(
            "slo",
            {"arrival_rps": None, "queue_p99_ms": 700.0, "oldest_age_ms": 900.0},
            5,
            id="slo-arrival-then-breach",
        ),
        # A group below its floor is raised to it after the lag could size nothing.
        pytest.param(
            "keda-lag",
            {"lag": None, "replicas": 0, "ready_replicas": 0, "min_replicas": 1},
            1,
            id="keda-lag-then-floor",
        ),
    ],
)
def test_line_does_not_say_holding_when_it_changes(
    policy: str, change: dict[str, Any], desired: int
) -> None:
    decision, _ = POLICIES[policy]([make_signals(**change)], ScalerState(), PolicyConfig(), 0.0)
    group = decision.groups[0]
    assert group.desired == desired != group.current
    assert "holding" not in group.line()

"""Partition shares: no member may get more of the load than it can serve."""

from __future__ import annotations

from typing import Any

import pytest

from scaler.config import PolicyConfig
from scaler.policy import decide
from scaler.policy.shares import busiest_utilization, stable_count
from scaler.signals import GroupSignals, ScalerState
from tests.unit.scaler.conftest import make_signals


@pytest.mark.parametrize(
    ("busy", "replicas", "partitions", "utilization"),
    [
        pytest.param(4.0, 4, 12, 1.0, id="4-of-12-even-at-the-mean"),
        pytest.param(4.0, 5, 12, 1.0, id="5-of-12-busiest-owns-3-like-4"),
        pytest.param(4.0, 6, 12, 4 * 2 / 12, id="6-of-12-busiest-owns-2"),
        pytest.param(10.0, 13, 32, 10 * 3 / 32, id="13-of-32-busiest-owns-3"),
    ],
)
def test_busiest_utilization(
    busy: float, replicas: int, partitions: int, utilization: float
) -> None:
    assert busiest_utilization(busy, replicas, partitions) == pytest.approx(utilization)


@pytest.mark.parametrize(
    ("desired", "busy", "partitions", "most", "cap", "count"),
    [
        pytest.param(5, 3.0, 12, 0.9, 12, 5, id="5-of-12-at-75pct-busiest-is-fine"),
        pytest.param(5, 3.9, 12, 0.9, 12, 6, id="5-of-12-busiest-at-98pct-needs-6"),
        pytest.param(13, 10.0, 32, 0.9, 32, 16, id="13-of-32-busiest-at-94pct-needs-16"),
        pytest.param(13, 10.0, 32, 1.0, 32, 13, id="at-most-100pct-13-will-do"),
        pytest.param(7, 5.5, 12, 0.9, 8, 8, id="never-above-the-cap"),
        pytest.param(20, 10.0, 1024, 0.9, 1024, 20, id="many-partitions-nothing-to-raise"),
    ],
)
def test_stable_count(
    desired: int, busy: float, partitions: int, most: float, cap: int, count: int
) -> None:
    assert stable_count(desired, busy, partitions, most, cap) == count


def _signals(arrival_rps: float, replicas: int, **kw: Any) -> GroupSignals:
    return make_signals(
        arrival_rps=arrival_rps,
        service_rps_per_replica=100.0,
        replicas=replicas,
        ready_replicas=replicas,
        partitions=12,
        **kw,
    )


def test_decision_names_the_busiest_member() -> None:
    # 390/s at 100/s per replica, 1 spare: 3.9 busy + 1 = 5 of 12 partitions; the two
    # members with 3 partitions would run at 98 %: 6.
    config = PolicyConfig(initial_spare_replicas=1.0, busiest_max_utilization=0.9)
    (g,) = decide([_signals(390.0, 4)], ScalerState(), config, 0.0)[0].groups
    reason = next(r for r in g.reasons if r.code == "partition_shares")
    assert g.desired == 6, g.line()
    assert reason.numbers["wanted"] == 5
    assert reason.numbers["busiest_utilization"] == pytest.approx(0.975)
    assert "busiest with 3, 98% busy at 390/s: 6 (2, 65%)" in g.line()


def test_off_when_none() -> None:
    config = PolicyConfig(initial_spare_replicas=1.0, busiest_max_utilization=None)
    (g,) = decide([_signals(390.0, 4)], ScalerState(), config, 0.0)[0].groups
    assert g.desired == 5 and all(r.code != "partition_shares" for r in g.reasons)

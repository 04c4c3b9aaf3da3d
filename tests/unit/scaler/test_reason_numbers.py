"""Reasons say the numbers that decided: small ones are not rounded away, a bound is named."""

from __future__ import annotations

import pytest

from scaler.config import PolicyConfig
from scaler.decision import reason_amount, reason_percent
from scaler.policy import decide
from scaler.signals import ScalerState
from tests.unit.scaler.conftest import make_signals


@pytest.mark.parametrize(
    ("x", "text"),
    [
        (1500.0, "1500"),
        (10.0, "10"),
        (2.5, "2.5"),
        (0.3, "0.3"),
        (0.1, "0.1"),
        (0.029, "0.029"),
        (0.00011, "0.00011"),
        (0.0, "0"),
        (-0.5, "-0.5"),
    ],
)
def test_an_amount_keeps_what_a_small_number_says(x: float, text: str) -> None:
    assert reason_amount(x) == text


@pytest.mark.parametrize(
    ("share", "text"),
    [(0.85, "85%"), (0.01, "1%"), (0.005, "0.5%"), (0.00012, "0.012%"), (0.0, "0%")],
)
def test_a_share_under_one_percent_is_not_zero(share: float, text: str) -> None:
    assert reason_percent(share) == text


@pytest.mark.parametrize(
    ("arrival_rps", "text"),
    [
        pytest.param(12000.0, "40 busy + 4.0 spare: 44, at most 80% busy: 50", id="ceiling-binds"),
        pytest.param(600.0, "2.0 busy + 4.0 spare: 6", id="spare-binds"),
    ],
)
def test_the_arrival_reason_names_the_utilization_ceiling_where_it_sets_the_count(
    arrival_rps: float, text: str
) -> None:
    s = make_signals(arrival_rps=arrival_rps, partitions=64, max_replicas=64)
    (g,) = decide([s], ScalerState(), PolicyConfig(), 0.0)[0].groups
    arrival = next(r for r in g.reasons if r.code in ("arrival", "within_band"))
    assert text in arrival.message, arrival.message


def test_a_lag_that_only_slows_a_scale_down_is_no_backlog_diagnosis() -> None:
    # 4 replicas for 30/s at 300/s each: sizing says 1, a lag of 400 (too old to be in flight)
    # keeps 2 more, still fewer than there are.
    s = make_signals(arrival_rps=30.0, utilization=0.025, lag=400, oldest_age_ms=2000.0)
    (g,) = decide([s], ScalerState(), PolicyConfig(), 0.0)[0].groups
    assert "backlog" in {r.code for r in g.reasons}, g.line()
    assert g.diagnosis != "backlog", g.line()

"""Holt's linear trend on irregular samples."""

from __future__ import annotations

import pytest

from scaler.forecast import holt


@pytest.mark.parametrize(
    ("samples", "horizon", "expected"),
    [
        pytest.param([(0, 100.0)], 30, 100.0, id="single-sample-is-level"),
        pytest.param([(t, 100.0) for t in range(0, 60, 5)], 30, 100.0, id="flat"),
        pytest.param([(t, 10.0 * t) for t in range(0, 120, 5)], 0, 1150.0, id="line-level"),
    ],
)
def test_holt_values(samples: list[tuple[float, float]], horizon: float, expected: float) -> None:
    fc = holt(samples, horizon, alpha=0.5, beta=0.3)
    assert fc is not None
    assert fc.value == pytest.approx(expected, rel=0.05)


def test_rising_line_forecasts_ahead() -> None:
    fc = holt([(t, 10.0 * t) for t in range(0, 300, 5)], 40, alpha=0.5, beta=0.3)
    assert fc is not None
    assert fc.trend_per_s == pytest.approx(10.0, rel=0.05)
    assert fc.value == pytest.approx(10.0 * 295 + 400, rel=0.05)


def test_falling_never_negative() -> None:
    fc = holt([(t, max(0.0, 100.0 - 10 * t)) for t in range(0, 10)], 100, 0.5, 0.3)
    assert fc is not None and fc.value == 0.0


def test_uneven_spacing_keeps_trend_per_second() -> None:
    even = holt([(t, 2.0 * t) for t in range(0, 100, 5)], 10, 0.5, 0.3)
    uneven = holt([(t, 2.0 * t) for t in (0, 5, 10, 30, 35, 40, 60, 65, 95)], 10, 0.5, 0.3)
    assert even is not None and uneven is not None
    assert uneven.trend_per_s == pytest.approx(2.0, rel=0.15)


def test_no_samples() -> None:
    assert holt([], 10, 0.5, 0.3) is None

"""The linear-trend forecast: values, significance, edge cases."""

from __future__ import annotations

import numpy as np
import pytest

from scaler.config import PolicyConfig
from scaler.forecast import estimate_rate, linear, ramp_after_flat
from scaler.policy.plan import Plan
from scaler.policy.rate import arrival_estimate
from scaler.signals import GroupState
from tests.unit.scaler.conftest import make_signals


@pytest.mark.parametrize(
    ("samples", "horizon", "expected"),
    [
        pytest.param([(t, 100.0) for t in range(0, 60, 5)], 30, 100.0, id="flat"),
        pytest.param([(t, 10.0 * t) for t in range(0, 120, 5)], 0, 1150.0, id="line-level"),
        pytest.param([(t, 10.0 * t) for t in range(0, 120, 5)], 40, 1550.0, id="line-ahead"),
        pytest.param([(t, 100.0 - 10 * t) for t in range(0, 10)], 100, 0.0, id="never-negative"),
    ],
)
def test_values(samples: list[tuple[float, float]], horizon: float, expected: float) -> None:
    fc = linear(samples, horizon)
    assert fc is not None
    assert fc.value == pytest.approx(expected, abs=1e-6)


def test_uneven_spacing_keeps_trend_per_second() -> None:
    fc = linear([(t, 2.0 * t) for t in (0, 5, 10, 30, 35, 40, 60, 65, 95)], 10)
    assert fc is not None and fc.trend_per_s == pytest.approx(2.0)


@pytest.mark.parametrize(
    ("slope", "significant"),
    [pytest.param(0.0, False, id="noise-only"), pytest.param(2.0, True, id="real-ramp")],
)
def test_noise_is_not_a_trend(slope: float, significant: bool) -> None:
    rng = np.random.default_rng(3)
    ts = np.arange(0.0, 60.0, 5.0)
    ys = 100 + slope * ts + rng.normal(0, 10, ts.size)
    fc = linear(list(zip(ts.tolist(), ys.tolist(), strict=True)), 30)
    assert fc is not None and fc.significant(3.0) is significant


@pytest.mark.parametrize(
    "samples",
    [
        pytest.param([], id="empty"),
        pytest.param([(0.0, 1.0), (5.0, 2.0)], id="two"),
        pytest.param([(5.0, 1.0), (5.0, 2.0), (5.0, 3.0)], id="same-time"),
    ],
)
def test_too_little_to_fit(samples: list[tuple[float, float]]) -> None:
    assert linear(samples, 10) is None


def noisy_ramp() -> tuple[np.ndarray, np.ndarray]:
    """Arrivals every 5 s for a minute, rising 0.6/s under noise (seed 0): a trend whose t
    sits between the plain threshold (3) and the one widened for overlapping windows."""
    rng = np.random.default_rng(0)
    ts = np.arange(0.0, 60.0, 5.0)
    return ts, 100 + 0.6 * ts + rng.normal(0, 10, ts.size)


@pytest.mark.parametrize(
    ("overlap", "kind"),
    [
        # 15 s windows every 5 s share two thirds of their requests: a slope 3.9 of the
        # least-squares errors from zero is 2 once the overlap is counted.
        pytest.param(1.0, "trend", id="independent-samples"),
        pytest.param(3.0, "mean", id="overlapping-windows"),
    ],
)
def test_overlap_widens_the_trend_test(overlap: float, kind: str) -> None:
    ts, ys = noisy_ramp()
    samples = list(zip(ts.tolist(), ys.tolist(), strict=True))
    fit = linear(samples, 30)
    assert fit is not None
    t = abs(fit.trend_per_s) / fit.trend_stderr_per_s
    assert 3.0 <= t < 3.0 * np.sqrt(3.0), t  # the case sits between the two thresholds
    est = estimate_rate(samples, 30.0, min_t=3.0, step_z=100.0, overlap=overlap)
    assert est is not None and est.kind == kind


@pytest.mark.parametrize(
    ("metrics_window_s", "kind"),
    [
        pytest.param(5.0, "trend", id="window-equals-interval"),
        pytest.param(15.0, "mean", id="window-three-intervals"),
    ],
)
def test_policy_rate_counts_the_window_overlap(metrics_window_s: float, kind: str) -> None:
    ts, ys = noisy_ramp()
    history = tuple(zip(ts[:-1].tolist(), ys[:-1].tolist(), strict=True))
    s = make_signals(collected_at=float(ts[-1]), arrival_rps=float(ys[-1]))
    plan = Plan(
        signals=s,
        state=GroupState(group=s.group, arrival_samples=history),
        desired=s.replicas,
        diagnosis="steady",
    )
    config = PolicyConfig(metrics_window_s=metrics_window_s, rate_step_z=100.0)
    est = arrival_estimate(plan, config)
    assert est is not None and est.kind == kind


def _flat_then_ramp(
    flat_until_s: float, slope: float, end_s: float = 60.0
) -> list[tuple[float, float]]:
    return [(t, 100.0 + slope * max(0.0, t - flat_until_s)) for t in np.arange(0.0, end_s + 1, 5.0)]


@pytest.mark.parametrize(
    ("samples", "slope", "level"),
    [
        pytest.param(_flat_then_ramp(35.0, 2.0), 2.0, 150.0, id="ramp-after-flat"),
        pytest.param(_flat_then_ramp(0.0, 2.0), 2.0, 220.0, id="ramp-throughout"),
        pytest.param(_flat_then_ramp(35.0, 0.0), None, None, id="flat"),
        pytest.param(_flat_then_ramp(35.0, -2.0), None, None, id="falling-is-not-a-ramp"),
        pytest.param(_flat_then_ramp(0.0, 2.0, end_s=15.0), None, None, id="four-samples"),
    ],
)
def test_ramp_after_flat(
    samples: list[tuple[float, float]], slope: float | None, level: float | None
) -> None:
    fc = ramp_after_flat(samples, 30.0)
    if slope is None:
        assert fc is None
        return
    assert fc is not None
    assert fc.trend_per_s == pytest.approx(slope)
    assert fc.level == pytest.approx(level)
    assert fc.value == pytest.approx(level + 30.0 * slope)


def test_a_ramp_after_a_flat_stretch_is_read_at_its_slope() -> None:
    # 40 s flat, then 2/s, under noise: the minute's line (0.54/s) and its newer half
    # (1.41/s) mix flat samples in; the flat-then-line fit reads the ramp.
    rng = np.random.default_rng(1)
    samples = [(t, v + float(rng.normal(0, 2))) for t, v in _flat_then_ramp(40.0, 2.0)]
    whole = linear(samples, 30.0)
    half = linear([p for p in samples if p[0] >= 30.0], 30.0)
    assert whole is not None and half is not None
    assert max(whole.trend_per_s, half.trend_per_s) < 1.6
    est = estimate_rate(samples, 30.0, min_t=3.0, step_z=100.0, overlap=3.0)
    assert est is not None and est.kind == "trend"
    assert est.trend_per_s == pytest.approx(2.0, rel=0.1)


@pytest.mark.parametrize("seed", range(5))
def test_noise_is_no_ramp_either(seed: int) -> None:
    rng = np.random.default_rng(seed)
    samples = [(float(t), 100.0 + float(rng.normal(0, 10))) for t in range(0, 61, 5)]
    est = estimate_rate(samples, 30.0, min_t=3.0, step_z=100.0, overlap=3.0)
    assert est is not None and est.kind == "mean"


# A burst of ~410/s from 125 s to 155 s inside the 60 s window, then flat at ~25/s: the
# 5 s samples of a 15 s metrics window, as `inferbus sim --time-to-ready-s 5` fed them.
AFTER_A_BURST = [
    (110.0, 19.3), (115.0, 20.5), (120.0, 14.7), (125.0, 112.7), (130.0, 257.7),
    (135.0, 372.3), (140.0, 411.5), (145.0, 408.8), (150.0, 423.7), (155.0, 294.9),
    (160.0, 153.3), (165.0, 24.3), (170.0, 24.0), (175.0, 25.6),
]  # fmt: skip


def test_after_a_burst_inside_the_window_the_fall_is_not_read_below_what_arrives() -> None:
    """The line through the burst's fall points to 0/s; sizing for that scaled a group
    with 25/s arriving to one replica, and the queue that built scaled it back up."""
    rate = estimate_rate(AFTER_A_BURST, 12.5, min_t=2.0, step_z=3.0, overlap=3.0)
    assert rate is not None and rate.kind == "trend" and rate.trend_per_s < 0
    assert rate.level == pytest.approx(24.0)  # the lower of the last two samples


def test_a_fall_that_levelled_off_is_not_read_below_what_arrives() -> None:
    samples = [
        (5.0 * i, float(v)) for i, v in enumerate([40, 39, 38, 37, 36, 35, 34, 33, 33, 33, 33])
    ]
    rate = estimate_rate(samples, 12.5, min_t=2.0, step_z=3.0)
    assert rate is not None and rate.kind == "trend" and rate.trend_per_s < 0
    assert rate.level == pytest.approx(33.0)  # the fitted lines end below it (31.7 whole)


@pytest.mark.parametrize(
    ("values", "level"),
    [
        pytest.param([100, 90, 80, 70, 60, 50], 50.0, id="still-falling-the-line-stands"),
        pytest.param([10, 20, 30, 40, 50, 60], 60.0, id="rising-the-line-stands"),
    ],
)
def test_a_steady_line_keeps_its_level(values: list[float], level: float) -> None:
    samples = [(5.0 * i, float(v)) for i, v in enumerate(values)]
    rate = estimate_rate(samples, 10.0, min_t=2.0, step_z=3.0)
    assert rate is not None and rate.kind == "trend"
    assert rate.level == pytest.approx(level)


# The live scale-step's arrival samples (2 s apart, a 10 s metrics window) as the step from
# 175/s to 25/s ended: the window's rate falls in a line, then holds (stop 29, t = 107-168 s).
AFTER_A_STEP_DOWN = [
    *((107.6 + 2.0 * i, 175.0) for i in range(22)),
    (151.6, 158.4), (153.6, 137.1), (155.6, 115.8), (157.6, 94.6), (159.6, 73.0),
    (161.6, 51.4), (163.6, 31.0), (165.6, 25.0), (167.6, 25.0),
]  # fmt: skip


def test_a_fall_then_flat_without_a_significant_trend_is_read_at_the_flat() -> None:
    """Regression: the mean of the fall and the flat read 50/s with 25/s arriving; the
    scaler scaled in at one tick and out again at the next."""
    config = PolicyConfig()
    rate = estimate_rate(
        AFTER_A_STEP_DOWN,
        10.0,
        min_t=config.forecast_min_t,
        step_z=config.rate_step_z,
        overlap=config.metrics_window_s / 2.0,
    )
    assert rate is not None and rate.kind != "trend"
    assert rate.level == pytest.approx(25.0, abs=1.0)


@pytest.mark.parametrize("seed", range(5))
def test_noise_around_a_flat_rate_keeps_its_mean(seed: int) -> None:
    values = 100.0 + np.random.default_rng(seed).normal(0, 5, 30)
    samples = [(2.0 * i, float(v)) for i, v in enumerate(values)]
    rate = estimate_rate(samples, 10.0, min_t=2.0, step_z=3.0, overlap=5.0)
    assert rate is not None and rate.kind != "trend"
    assert rate.level == pytest.approx(float(values.mean()), rel=0.05)

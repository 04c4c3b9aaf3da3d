"""The arrival rate the policy sizes for: a level, a trend trusted only out of the noise, steps.

Holt's smoothing (the seed's forecast) followed every swing of a 15 s rate: on a steady
but bursty load its trend was noise, and 30 s ahead that noise became replicas. Here a
line is fitted over the recent samples. Its slope counts only when it is `min_t` standard
errors from zero (the samples' windows overlap, so the standard error is optimistic and
`min_t` is high); without a trend the level is the mean. A newest sample further from the
line through the earlier ones than `step_z` of their scatter is a step (a burst starting,
a load dropping away) that no line follows: the level is that sample.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Forecast:
    """The fitted rate now, its slope per second, and the value `horizon_s` ahead (>= 0)."""

    level: float
    trend_per_s: float
    trend_stderr_per_s: float
    horizon_s: float
    value: float
    residual_sd: float
    """Scatter of the samples around the line."""

    def significant(self, min_t: float) -> bool:
        """The slope is at least `min_t` standard errors from zero."""
        return abs(self.trend_per_s) >= min_t * self.trend_stderr_per_s


def linear(samples: Sequence[tuple[float, float]], horizon_s: float) -> Forecast | None:
    """Least-squares line through (time s, value) samples, oldest first; None below 3 samples."""
    n = len(samples)
    if n < 3:
        return None
    ts = [t for t, _ in samples]
    ys = [y for _, y in samples]
    t_mean, y_mean = sum(ts) / n, sum(ys) / n
    sxx = sum((t - t_mean) ** 2 for t in ts)
    if sxx <= 0:
        return None
    slope = sum((t - t_mean) * (y - y_mean) for t, y in zip(ts, ys, strict=True)) / sxx
    now = ts[-1]
    level = y_mean + slope * (now - t_mean)
    residual = sum((y - (y_mean + slope * (t - t_mean))) ** 2 for t, y in zip(ts, ys, strict=True))
    stderr = math.sqrt(residual / (n - 2) / sxx)
    return Forecast(
        level=level,
        trend_per_s=slope,
        trend_stderr_per_s=stderr,
        horizon_s=horizon_s,
        value=max(0.0, level + slope * horizon_s),
        residual_sd=math.sqrt(residual / (n - 2)),
    )


RateKind = Literal["newest", "mean", "trend", "step"]


@dataclass(frozen=True)
class RateEstimate:
    """The rate now and `horizon_s` ahead, and how it was read from the samples."""

    kind: RateKind
    level: float
    ahead: float
    trend_per_s: float = 0.0
    trend_stderr_per_s: float = 0.0


def estimate_rate(
    samples: Sequence[tuple[float, float]],
    horizon_s: float,
    *,
    min_t: float,
    step_z: float,
    floor_share: float = 0.05,
) -> RateEstimate | None:
    """Level and value ahead from (time s, rate) samples, oldest first; None without any.

    `floor_share` keeps a flat, noiseless history (an idle group) from calling every
    change a step: the scatter counts as at least this share of the level.
    """
    if not samples:
        return None
    t_new, newest = samples[-1]
    before = linear(samples[:-1], 0.0)
    if before is not None:
        predicted = before.level + before.trend_per_s * (t_new - samples[-2][0])
        scatter = max(before.residual_sd, floor_share * max(abs(predicted), abs(newest)))
        if abs(newest - predicted) > step_z * scatter:
            return RateEstimate("step", newest, newest)
    fit = linear(samples, horizon_s)
    if fit is None:
        return RateEstimate("newest", newest, newest)
    # A ramp that starts after a flat stretch bends the line: the newer half sees its slope.
    half = linear([p for p in samples if p[0] >= t_new - (t_new - samples[0][0]) / 2], horizon_s)
    trends = [f for f in (fit, half) if f is not None and f.significant(min_t)]
    if trends:
        best = max(trends, key=lambda f: f.value)
        return RateEstimate(
            "trend", best.level, best.value, best.trend_per_s, best.trend_stderr_per_s
        )
    mean = sum(v for _, v in samples) / len(samples)
    return RateEstimate("mean", mean, mean)

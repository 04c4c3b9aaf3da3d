"""The arrival rate the policy sizes for: a level, a trend trusted only out of the noise, steps.

Holt's smoothing (the seed's forecast) followed every swing of a 15 s rate: on a steady
but bursty load its trend was noise, and 30 s ahead that noise became replicas. Here a
line is fitted over the recent samples. Its slope counts only when it is `min_t` standard
errors from zero; without a trend the level is the mean. The samples are rates over windows
longer than the spacing between them (a 15 s window every 5 s), so neighbours share most of
their requests and the least-squares standard error, which assumes independent samples,
is too small by the square root of that overlap: it is widened by it. Without that, a
3-sigma trend was ~1.7 sigma, and on the conversation trace a slow wobble read as a trend
a few times an hour, each a scale-up held for a minute (docs/scaler.md). A step (a burst starting or
ending, a load dropping away) is what no line follows: when the samples split into an
older and a newer run whose means differ by more than `step_z` of their scatter, only the
newer run counts. A ramp that starts after a flat stretch is also fitted as what it is,
flat up to a break and a line from there (`ramp_after_flat`): a line through the whole
window, or its newer half, that mixes flat samples with the ramp's reads a smaller slope
(the sawtooth family's first ramp, 1.8/s at x20, read 1.1/s where the trend first counted,
1.3/s with this fit: one replica more started at that tick).
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


_RAMP_MIN_SAMPLES = 4
"""Samples after the break a ramp's line is fitted to, at the least."""


def ramp_after_flat(samples: Sequence[tuple[float, float]], horizon_s: float) -> Forecast | None:
    """Flat up to a break, then a line: the break that fits best; None unless it rises.

    The model is `y = a + slope * max(0, t - t_break)` over every sample, the break at one
    of the samples with at least four after it. Its standard error counts the three fitted
    numbers (level, slope, break).
    """
    n = len(samples)
    ys = [y for _, y in samples]
    y_mean = sum(ys) / n if n else 0.0
    best: tuple[float, float, float, float, float] | None = None
    for b in range(n - _RAMP_MIN_SAMPLES):
        t_break = samples[b][0]
        xs = [max(0.0, t - t_break) for t, _ in samples]
        x_mean = sum(xs) / n
        sxx = sum((x - x_mean) ** 2 for x in xs)
        if sxx <= 0:
            continue
        slope = sum((x - x_mean) * (y - y_mean) for x, y in zip(xs, ys, strict=True)) / sxx
        sse = sum((y - y_mean - slope * (x - x_mean)) ** 2 for x, y in zip(xs, ys, strict=True))
        if best is None or sse < best[0]:
            best = (sse, slope, x_mean, sxx, xs[-1])
    if best is None or best[1] <= 0:
        return None
    sse, slope, x_mean, sxx, x_now = best
    level = y_mean + slope * (x_now - x_mean)
    scatter = math.sqrt(sse / (n - 3))
    return Forecast(
        level=level,
        trend_per_s=slope,
        trend_stderr_per_s=scatter / math.sqrt(sxx),
        horizon_s=horizon_s,
        value=max(0.0, level + slope * horizon_s),
        residual_sd=scatter,
    )


RateKind = Literal["mean", "trend", "step"]


@dataclass(frozen=True)
class RateEstimate:
    """The rate now and `horizon_s` ahead, and how it was read from the samples."""

    kind: RateKind
    level: float
    ahead: float
    trend_per_s: float = 0.0
    trend_stderr_per_s: float = 0.0
    before_step: float | None = None
    """The mean rate before the last step, when there was one."""
    step_at: float | None = None
    """When the first sample after the last step was taken."""

    def rising(self) -> bool:
        """A significant upward trend, or a step up."""
        if self.before_step is not None and self.level > self.before_step:
            return True
        return self.kind == "trend" and self.trend_per_s > 0


def _sse(values: Sequence[float]) -> float:
    mean = sum(values) / len(values)
    return sum((v - mean) ** 2 for v in values)


def last_regime(
    samples: Sequence[tuple[float, float]], *, step_z: float, floor_share: float
) -> tuple[Sequence[tuple[float, float]], float | None]:
    """The samples since the last step in the rate, and the mean before it (None: no step).

    A step is the split into an older and a newer run whose means differ by more than
    `step_z` of the scatter inside the runs (at least `floor_share` of the larger mean):
    a burst starting or ending, a load dropping away. Before it the samples describe
    another load, so they are dropped.
    """
    n = len(samples)
    values = [v for _, v in samples]
    best: tuple[float, int] | None = None
    for k in range(1, n):
        sse = (_sse(values[:k]) if k > 1 else 0.0) + (_sse(values[k:]) if n - k > 1 else 0.0)
        if best is None or sse < best[0]:
            best = (sse, k)
    if best is None:
        return samples, None
    sse, k = best
    old, new = values[:k], values[k:]
    old_mean, new_mean = sum(old) / len(old), sum(new) / len(new)
    scatter = math.sqrt(sse / max(1, n - 2))
    scatter = max(scatter, floor_share * max(abs(old_mean), abs(new_mean)))
    if abs(new_mean - old_mean) <= step_z * scatter:
        return samples, None
    return samples[k:], old_mean


def _trend_level(fit: Forecast, recent: Sequence[tuple[float, float]]) -> float:
    """The line's value now, but a falling line no lower than the last two samples: once a
    fall has levelled off (a burst left the window, then flat samples), the line through
    the fall still points down and would size for less than is arriving."""
    if fit.trend_per_s >= 0:
        return max(0.0, fit.level)
    return max(0.0, fit.level, min(v for _, v in recent[-2:]))


_FALL_SHARE = 0.5
"""A line through the run that drops this share of its mean, or more, is a fall."""


def _untrended_level(fit: Forecast, recent: Sequence[tuple[float, float]]) -> float:
    """The run's mean where no trend is significant; but after a fall that has levelled off
    (a line through it pointing down), no more than the line's value now or the last two
    samples, whichever is higher. The mean of a fall and the flat after it sized for twice
    what arrived: live, a scale-down read the flat, the next tick that mean, and scaled out
    again two seconds later (docs/benchmarks.md, stop 29's scale-step). A fall is a line
    that drops by at least `_FALL_SHARE` of the mean over the run: noise about a level is
    no fall."""
    mean = sum(v for _, v in recent) / len(recent)
    fall = -fit.trend_per_s * (recent[-1][0] - recent[0][0])
    if fall < _FALL_SHARE * mean:  # rising, or noise about a level: the mean
        return mean
    return min(mean, max(0.0, fit.level, min(v for _, v in recent[-2:])))


def estimate_rate(
    samples: Sequence[tuple[float, float]],
    horizon_s: float,
    *,
    min_t: float,
    step_z: float,
    floor_share: float = 0.05,
    overlap: float = 1.0,
) -> RateEstimate | None:
    """Level and value ahead from (time s, rate) samples, oldest first; None without any.

    `floor_share` keeps a flat, noiseless history (an idle group) from calling every
    change a step: the scatter counts as at least this share of the level. `overlap` is
    how many consecutive samples share one window's requests (window / spacing, >= 1): a
    trend must be `min_t` standard errors from zero with the error widened by its root.
    """
    if not samples:
        return None
    recent, before = last_regime(samples, step_z=step_z, floor_share=floor_share)
    kind: RateKind = "mean" if before is None else "step"
    at = None if before is None else recent[0][0]
    fit = linear(recent, horizon_s)
    if fit is None:
        mean = sum(v for _, v in recent) / len(recent)
        return RateEstimate(kind, mean, mean, before_step=before, step_at=at)
    # A ramp that starts after a flat stretch bends the line: the newer half sees more of its
    # slope, a flat-then-line fit all of it.
    t_new, t_old = recent[-1][0], recent[0][0]
    half = linear([p for p in recent if p[0] >= t_new - (t_new - t_old) / 2], horizon_s)
    ramp = ramp_after_flat(recent, horizon_s)
    widen = math.sqrt(max(1.0, overlap))
    trends = [f for f in (fit, half, ramp) if f is not None and f.significant(min_t * widen)]
    if trends:
        best = max(trends, key=lambda f: f.value)
        return RateEstimate(
            "trend",
            _trend_level(best, recent),
            best.value,
            best.trend_per_s,
            best.trend_stderr_per_s,
            before_step=before,
            step_at=at,
        )
    level = _untrended_level(fit, recent)
    return RateEstimate(kind, level, level, before_step=before, step_at=at)

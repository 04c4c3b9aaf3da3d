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
newer run counts.
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
    # A ramp that starts after a flat stretch bends the line: the newer half sees its slope.
    t_new, t_old = recent[-1][0], recent[0][0]
    half = linear([p for p in recent if p[0] >= t_new - (t_new - t_old) / 2], horizon_s)
    widen = math.sqrt(max(1.0, overlap))
    trends = [f for f in (fit, half) if f is not None and f.significant(min_t * widen)]
    if trends:
        best = max(trends, key=lambda f: f.value)
        return RateEstimate(
            "trend",
            max(0.0, best.level),
            best.value,
            best.trend_per_s,
            best.trend_stderr_per_s,
            before_step=before,
            step_at=at,
        )
    mean = sum(v for _, v in recent) / len(recent)
    return RateEstimate(kind, mean, mean, before_step=before, step_at=at)

"""Holt's linear-trend forecast of the arrival rate, over irregularly spaced samples."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Forecast:
    """Smoothed level, trend per second, and the value `horizon_s` ahead (never negative)."""

    level: float
    trend_per_s: float
    horizon_s: float
    value: float


def holt(
    samples: Sequence[tuple[float, float]], horizon_s: float, alpha: float, beta: float
) -> Forecast | None:
    """Holt's double exponential smoothing on (time s, value) samples, oldest first.

    The trend is kept per second so that uneven collection intervals (a slow or
    missed tick) do not distort it. Returns None without samples.
    """
    if not samples:
        return None
    t_prev, level = samples[0]
    trend = 0.0
    for t, y in samples[1:]:
        dt = t - t_prev
        if dt <= 0:
            # A repeated timestamp carries no trend information; refresh the level only.
            level = alpha * y + (1 - alpha) * level
            continue
        predicted = level + trend * dt
        new_level = alpha * y + (1 - alpha) * predicted
        trend = beta * (new_level - level) / dt + (1 - beta) * trend
        level = new_level
        t_prev = t
    return Forecast(
        level=level,
        trend_per_s=trend,
        horizon_s=horizon_s,
        value=max(0.0, level + trend * horizon_s),
    )

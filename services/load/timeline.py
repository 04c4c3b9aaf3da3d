"""Time series of a run (rates, latency, backlog) and when a backlog stopped growing."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from scaler.sim.workload import FloatArray


def grid(end_s: float, step_s: float) -> FloatArray:
    """Sample times 0, step, 2·step, ... up to and including `end_s`."""
    return np.arange(0.0, end_s + step_s / 2, step_s)


def rate(times: Sequence[float] | FloatArray, end_s: float, width_s: float = 1.0) -> FloatArray:
    """Events per second in consecutive bins of `width_s` from 0 to `end_s`."""
    edges = np.arange(0.0, end_s + width_s, width_s)
    counts, _ = np.histogram(np.asarray(times, dtype=float), bins=edges)
    return counts / width_s


def latency(
    sent_t: Sequence[float], values_ms: Sequence[float], end_s: float, width_s: float = 2.0
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """(bin starts, p50, p99) of values grouped by send time; NaN where a bin is empty."""
    starts = np.arange(0.0, end_s, width_s)
    t = np.asarray(sent_t, dtype=float)
    v = np.asarray(values_ms, dtype=float)
    p50, p99 = np.full(starts.size, np.nan), np.full(starts.size, np.nan)
    index = np.floor(t / width_s).astype(int)
    for i in range(starts.size):
        chosen = v[index == i]
        if chosen.size:
            p50[i], p99[i] = np.percentile(chosen, 50), np.percentile(chosen, 99)
    return starts, p50, p99


def backlog(sent_t: FloatArray, answered_t: FloatArray, at: FloatArray) -> FloatArray:
    """Requests sent by each time in `at` and not answered by then (what the client waits on)."""
    sent = np.searchsorted(np.sort(sent_t), at, side="right")
    done = np.searchsorted(np.sort(answered_t), at, side="right")
    return (sent - done).astype(float)


@dataclass(frozen=True)
class BacklogPeak:
    """How a backlog behaved from `start_s`: how long it grew, how high, when it drained."""

    grew_for_s: float
    """From `start_s` to the peak: the time until the backlog stopped growing."""
    peak: float
    peak_at_s: float
    drained_after_s: float | None
    """From `start_s` to the first sample after the peak at or below the drain level."""


def backlog_peak(
    at: FloatArray,
    values: FloatArray,
    *,
    start_s: float,
    end_s: float,
    min_peak: float,
    drain_level: float,
) -> BacklogPeak | None:
    """The peak of a backlog series within [start_s, end_s]; None when it never reached
    `min_peak` (capacity kept up: nothing grew). Drained is searched until the series ends."""
    inside = (at >= start_s) & (at <= end_s) & ~np.isnan(values)
    if not inside.any():
        return None
    times, lags = at[inside], values[inside]
    peak_index = int(np.argmax(lags))  # the first time the highest value was reached
    peak = float(lags[peak_index])
    if peak < min_peak:
        return None
    peak_at = float(times[peak_index])
    after = (at > peak_at) & ~np.isnan(values) & (values <= drain_level)
    drained = float(at[after][0]) - start_s if after.any() else None
    return BacklogPeak(
        grew_for_s=round(peak_at - start_s, 1),
        peak=round(peak, 1),
        peak_at_s=round(peak_at, 1),
        drained_after_s=None if drained is None else round(drained, 1),
    )

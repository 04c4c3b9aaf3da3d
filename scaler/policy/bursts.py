"""Burst memory: from the recent offered load, how big bursts get and how long gaps last.

Offered load is arrivals over per-replica throughput (busy replicas' worth of work), one
sample per tick over `burst_memory_s`. Between the base (the 10th percentile of the
remembered load) and the top (its highest), a burst starts when the load climbs above
twice `burst_low_share` of that range and ends when it falls below `burst_low_share` of
it (a Schmitt trigger: a load wobbling around one line is neither); the stretch in
between bursts is a gap. The base makes a load that idles at zero between bursts and a
load that falls back to a third of its peak (a sawtooth) read the same way. Idle between bursts
is not idle for good: while bursts keep coming after gaps shorter than what it costs to
stop a replica and get it back, the SLO policy keeps what the next burst needs.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Burst:
    """One remembered burst: its peak load and how long it took to get there from a gap."""

    peak_load: float
    rise_s: float | None
    """From the last sample below the gap line to the first at 80 % of the peak; None if no
    gap came before."""


@dataclass(frozen=True)
class BurstMemory:
    """What the remembered load says about bursts (loads in busy replicas)."""

    top_load: float
    base_load: float
    """The 10th percentile of the remembered load: what the gaps fall back to."""
    bursts: tuple[Burst, ...]
    """Completed bursts, oldest first."""
    gaps_s: tuple[float, ...]
    """Lengths of completed gaps (from the end of one burst to the start of the next)."""
    load: float
    """The newest sample's load."""
    in_gap_s: float
    """How long the newest stretch of low load has lasted; 0 while in a burst."""
    since_gap_s: float | None
    """How long since the load left the last gap, if it is above the gap line now."""
    rising: bool
    """The newest sample is above the one before."""

    def onsets(self) -> tuple[Burst, ...]:
        """Bursts that started from a gap (their rise time is known)."""
        return tuple(b for b in self.bursts if b.rise_s is not None)

    def bursty(self, min_count: int, min_ratio: float) -> bool:
        """At least `min_count` bursts from a gap, typically `min_ratio` times the base."""
        onsets = self.onsets()
        return len(onsets) >= min_count and self.peak(0.5) >= min_ratio * self.base_load

    def median_rise_s(self) -> float:
        """Median rise time of the bursts that started from a gap (inf without any)."""
        rises = [b.rise_s for b in self.onsets() if b.rise_s is not None]
        return statistics.median(rises) if rises else math.inf

    def peak(self, quantile: float) -> float:
        """The `quantile` of the peak loads of the bursts that started from a gap."""
        peaks = sorted(b.peak_load for b in self.onsets())
        if not peaks:
            return 0.0
        return peaks[min(len(peaks) - 1, max(0, math.ceil(quantile * len(peaks)) - 1))]

    def median_gap_s(self) -> float:
        """Median completed gap (inf without any)."""
        return statistics.median(self.gaps_s) if self.gaps_s else math.inf


def remember(samples: Sequence[tuple[float, float]], low_share: float) -> BurstMemory | None:
    """Split (time s, load) samples, oldest first, into bursts and gaps; None if flat."""
    if not samples:
        return None
    loads = sorted(load for _, load in samples)
    top = loads[-1]
    base = loads[len(loads) // 10]
    if top <= 0 or top <= base:
        return None
    low, high = base + low_share * (top - base), base + 2 * low_share * (top - base)
    bursts: list[Burst] = []
    gaps: list[float] = []
    last_gap_t: float | None = None
    last_high_t: float | None = None
    run: list[tuple[float, float]] = []

    def close_run() -> None:
        peak = max(v for _, v in run)
        reach = next(t for t, v in run if v >= 0.8 * peak)
        rise = None if last_gap_t is None else reach - last_gap_t
        bursts.append(Burst(peak_load=peak, rise_s=rise))

    for t, load in samples:
        if load >= (low if run else high):
            if not run and last_high_t is not None and last_gap_t is not None:
                gaps.append(t - last_high_t)
            run.append((t, load))
            last_high_t = t
            continue
        if run:
            close_run()
            run = []
        if load < low:
            last_gap_t = t
    # A burst still going on has no final peak yet: it is not remembered as one.
    newest_t, newest = samples[-1]
    in_gap = 0.0 if run or last_high_t is None else newest_t - last_high_t
    leaving = newest >= low and last_gap_t is not None
    rising = len(samples) > 1 and newest > samples[-2][1]
    return BurstMemory(
        top_load=top,
        base_load=base,
        bursts=tuple(bursts),
        gaps_s=tuple(gaps),
        load=newest,
        in_gap_s=in_gap,
        since_gap_s=newest_t - last_gap_t if leaving and last_gap_t is not None else None,
        rising=rising,
    )

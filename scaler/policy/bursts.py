"""Burst memory: from the recent offered load, how big bursts get and how long gaps last.

Offered load is arrivals over per-replica throughput (busy replicas' worth of work), one
sample per tick over `burst_memory_s`. A burst starts when the load reaches twice
`burst_low_share` of the highest remembered load and ends when it falls below
`burst_low_share` of it (a Schmitt trigger: a load wobbling around one line is neither);
the stretch in between bursts is a gap. Idle between bursts
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
    """From the last gap sample to the first at 80 % of the peak; None if no gap came before."""


@dataclass(frozen=True)
class BurstMemory:
    """What the remembered load says about bursts (loads in busy replicas)."""

    top_load: float
    bursts: tuple[Burst, ...]
    gaps_s: tuple[float, ...]
    """Lengths of completed gaps (from the end of one burst to the start of the next)."""
    in_gap_s: float
    """How long the newest stretch of low load has lasted; 0 while in a burst."""

    def onsets(self) -> tuple[Burst, ...]:
        """Bursts that started from a gap (their rise time is known)."""
        return tuple(b for b in self.bursts if b.rise_s is not None)

    def median_rise_s(self) -> float:
        """Median rise time of the bursts that started from a gap (inf without any)."""
        rises = [b.rise_s for b in self.onsets() if b.rise_s is not None]
        return statistics.median(rises) if rises else math.inf

    def typical_peak(self) -> float:
        """Median peak load of the bursts that started from a gap."""
        return statistics.median(b.peak_load for b in self.onsets()) if self.onsets() else 0.0

    def median_gap_s(self) -> float:
        """Median completed gap (inf without any)."""
        return statistics.median(self.gaps_s) if self.gaps_s else math.inf


def remember(samples: Sequence[tuple[float, float]], low_share: float) -> BurstMemory | None:
    """Split (time s, load) samples, oldest first, into bursts and gaps; None without load."""
    if not samples:
        return None
    top = max(load for _, load in samples)
    if top <= 0:
        return None
    low, high = low_share * top, 2 * low_share * top
    bursts: list[Burst] = []
    gaps: list[float] = []
    last_low_t: float | None = None
    last_high_t: float | None = None
    run: list[tuple[float, float]] = []

    def close_run() -> None:
        peak = max(v for _, v in run)
        reach = next(t for t, v in run if v >= 0.8 * peak)
        rise = None if last_low_t is None else reach - last_low_t
        bursts.append(Burst(peak_load=peak, rise_s=rise))

    for t, load in samples:
        if load >= (low if run else high):
            if not run and last_high_t is not None and last_low_t is not None:
                gaps.append(t - last_high_t)
            run.append((t, load))
            last_high_t = t
            continue
        if run:
            close_run()
            run = []
        last_low_t = t
    if run:
        close_run()
    newest_t = samples[-1][0]
    in_gap = 0.0 if run or last_high_t is None else newest_t - last_high_t
    return BurstMemory(top_load=top, bursts=tuple(bursts), gaps_s=tuple(gaps), in_gap_s=in_gap)

"""Burst memory: from the recent offered load, how big bursts get and how long gaps last.

Offered load is arrivals over per-replica throughput (busy replicas' worth of work), one
sample per tick over `burst_memory_s`. Between the base (the 10th percentile of the
remembered load) and the top (its 95th percentile, so that one outsized burst does not
move the lines), a burst starts when the load climbs above twice `burst_low_share` of
that range and ends when it falls below `burst_low_share` of it (a Schmitt trigger: a
load wobbling around one line is neither); a stretch below the lower line is a gap. The
base makes a load that idles at zero between bursts and a load that falls back to a third
of its peak (a sawtooth) read the same way. Idle between bursts is not idle for good:
while bursts keep coming after gaps shorter than what it costs to stop a replica and get
it back, the SLO policy keeps what the next burst needs before new capacity could serve
it (each burst's load within a keep cost of when it could first be seen: its peak for a
burst that rises faster than a replica starts, less for a slow ramp).
"""

from __future__ import annotations

import itertools
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
    lead_load: float
    """The highest load within the lead (`remember`'s `lead_s`) of its first sample above
    the gap line: what the burst needed before a replica started when it could first be
    seen would serve. The peak when no gap came before."""
    left_gap_at_s: float | None = None
    """When its first sample above the gap line was taken; None if no gap came before."""


@dataclass(frozen=True)
class DueBurst:
    """When the next burst on a schedule is due (`BurstMemory.next_due`)."""

    at_s: float
    period_s: float
    """The median interval between the remembered onsets."""
    spread_s: float
    """The furthest any of those intervals lay from the median."""


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
    quiet_before_s: float = 0.0
    """Before the first burst (remembered, or going on), from the first sample under the
    gap line to the last one (small bursts in between count, as in `gaps_s`): the gap
    before that burst lasted at least this long. 0 when no sample before it was under the
    gap line."""

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
        return _quantile([b.peak_load for b in self.onsets()], quantile)

    def longest_quiet_s(self) -> float:
        """The longest gap seen: a completed one, or the one before the first burst
        (`quiet_before_s`); 0 without either."""
        return max((*self.gaps_s, self.quiet_before_s), default=0.0)

    def median_gap_s(self) -> float:
        """Median completed gap (inf without any)."""
        return statistics.median(self.gaps_s) if self.gaps_s else math.inf

    def knows_quantile(self, quantile: float) -> bool:
        """The `quantile` of the bursts from a gap lies below their highest (enough of them).

        At the (n + 1) plotting position the rank q(n + 1) reaches the highest of n bursts
        until n >= (1 + q) / (1 - q) (7 at p75): before that the "quantile" is only the highest
        of a few, which the next burst exceeds with probability 1 / (n + 1).
        """
        n = len(self.onsets())
        return n > 0 and math.ceil(quantile * (n + 1) - 1e-9) < n

    def next_due(self, min_intervals: int, tolerance_share: float) -> DueBurst | None:
        """When the next burst should leave its gap, if the last onsets kept time.

        Bursts on a schedule (a job every five minutes) leave their gaps at a steady
        interval: when each of the last `min_intervals` intervals between onsets lies within
        `tolerance_share` of their median, the next is due one median after the last. Only
        that one: a burst that does not come ends the schedule, until the intervals after it
        keep time again. The onsets must lie in the memory (`burst_memory_s`): with three
        onsets and 30 minutes, periods up to about 10 minutes.
        """
        if min_intervals < 1:
            return None
        starts = [b.left_gap_at_s for b in self.onsets() if b.left_gap_at_s is not None]
        intervals = [b - a for a, b in itertools.pairwise(starts)][-min_intervals:]
        if len(intervals) < min_intervals:
            return None
        period = statistics.median(intervals)
        spread = max(abs(i - period) for i in intervals)
        if period <= 0 or spread > tolerance_share * period:
            return None
        return DueBurst(at_s=starts[-1] + period, period_s=period, spread_s=spread)

    def lead_peak(self, quantile: float) -> float:
        """The `quantile` of what the bursts from a gap needed within the lead of their onset."""
        return _quantile([b.lead_load for b in self.onsets()], quantile)


def _quantile(values: Sequence[float], quantile: float) -> float:
    """The `quantile` of a few values at the (n + 1) plotting position (0 without any).

    The next burst is one more draw: of n remembered ones, the rank q(n + 1) is what it
    stays under with probability q. With few bursts that is the highest (p75 of 4 bursts
    is the 4th, not the 3rd): an hour's first minutes must not size for its smallest.
    """
    ordered = sorted(values)
    if not ordered:
        return 0.0
    rank = math.ceil(quantile * (len(ordered) + 1) - 1e-9) - 1
    return ordered[min(len(ordered) - 1, max(0, rank))]


def remember(
    samples: Sequence[tuple[float, float]], low_share: float, lead_s: float = math.inf
) -> BurstMemory | None:
    """Split (time s, load) samples, oldest first, into bursts and gaps; None if flat.

    `lead_s` is how long after a burst could first be seen (its first sample above the gap
    line) new capacity could serve: each burst remembers the highest load it reached within
    it (`Burst.lead_load`).
    """
    if not samples:
        return None
    loads = sorted(load for _, load in samples)
    # The 95th percentile, not the highest: with the highest, one burst twice the others
    # moved both lines up by half, the earlier bursts fell below the burst line, their gaps
    # merged, and the hold let go just before the next burst (on-off, 11 000 late requests).
    top = loads[min(len(loads) - 1, int(0.95 * len(loads)))]
    base = loads[len(loads) // 10]
    if top <= 0 or top <= base:
        return None
    low, high = base + low_share * (top - base), base + 2 * low_share * (top - base)
    bursts: list[Burst] = []
    gaps: list[float] = []
    last_gap_t: float | None = None
    last_high_t: float | None = None
    run: list[tuple[float, float]] = []
    # Samples since the last gap sample: the climb through the band, then the run.
    risen: list[tuple[float, float]] = []

    def close_run() -> None:
        peak = max(v for _, v in run)
        reach = next(t for t, v in run if v >= 0.8 * peak)
        if last_gap_t is None:
            bursts.append(Burst(peak_load=peak, rise_s=None, lead_load=peak))
            return
        early = [v for t, v in risen if t - risen[0][0] <= lead_s]
        bursts.append(
            Burst(
                peak_load=peak,
                rise_s=reach - last_gap_t,
                lead_load=max(early, default=risen[0][1]),
                left_gap_at_s=risen[0][0],
            )
        )

    last_active_t: float | None = None
    quiet_before, first_quiet_t = 0.0, None
    for t, load in samples:
        if load >= low:
            risen.append((t, load))
            last_active_t = t
        if load >= (low if run else high):
            if not run and last_high_t is not None and last_gap_t is not None:
                gaps.append(t - last_high_t)
            elif not run and last_high_t is None and last_gap_t is not None:
                # Set with `last_gap_t`, so never None here.
                quiet_before = last_gap_t - (first_quiet_t or 0.0)
            run.append((t, load))
            last_high_t = t
            continue
        if run:
            close_run()
            run = []
        if load < low:
            last_gap_t = t
            first_quiet_t = t if first_quiet_t is None else first_quiet_t
            risen = []
    # A burst still going on has no final peak yet: it is not remembered as one.
    newest_t, newest = samples[-1]
    # A gap is a stretch below the gap line: a small burst that rises above it but not to the
    # burst line is no burst, but the gap starts again after it (it is not idle).
    in_gap = 0.0 if run or last_active_t is None else newest_t - last_active_t
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
        quiet_before_s=quiet_before,
    )

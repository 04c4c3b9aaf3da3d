"""Pure rate arithmetic: arrival and service rates from offset deltas over a time window."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class OffsetSample:
    """End and resume positions of every answered partition at one instant (monotonic s)."""

    at_s: float
    ends: Mapping[int, int]
    positions: Mapping[int, int]


@dataclass(frozen=True)
class Rates:
    """Records per second over `span_s`; `resets` counts offsets that went backwards."""

    arrival_rps: float | None
    service_rps: float | None
    span_s: float
    resets: int


def window(samples: Iterable[OffsetSample], horizon_s: float) -> tuple[OffsetSample, ...]:
    """The samples within `horizon_s` of the newest, always keeping at least two."""
    ordered = sorted(samples, key=lambda s: s.at_s)
    if len(ordered) <= 2:
        return tuple(ordered)
    newest = ordered[-1].at_s
    kept = [s for s in ordered if newest - s.at_s <= horizon_s]
    return tuple(ordered[-2:]) if len(kept) < 2 else tuple(kept)


def _advance(old: Mapping[int, int], new: Mapping[int, int]) -> tuple[int, int]:
    """Records gained over partitions present in both samples, and how many went backwards."""
    gained = resets = 0
    for partition, value in new.items():
        before = old.get(partition)
        if before is None:
            continue
        if value < before:
            # A recreated topic or a reset group: the gap is unknown, so count nothing.
            resets += 1
        else:
            gained += value - before
    return gained, resets


def rates(samples: tuple[OffsetSample, ...]) -> Rates:
    """Arrival rate from end-offset deltas, service rate from committed-position deltas.

    Only the samples since the last reset count: offsets that went backwards (a broker back
    without its logs, a recreated topic) leave the gap unknown, and counting the time
    across it as time without records read a restarted broker as "no arrivals" and scaled
    a busy group down. None until two samples follow the reset.
    """
    if len(samples) < 2:
        return Rates(None, None, 0.0, 0)
    steps = []
    resets = 0
    for old, new in itertools.pairwise(samples):
        a, ra = _advance(old.ends, new.ends)
        s, rs = _advance(old.positions, new.positions)
        steps.append((a, s, ra + rs))
        resets += ra + rs
    first = max((i + 1 for i, (_, _, r) in enumerate(steps) if r), default=0)
    kept = steps[first:]
    span = samples[-1].at_s - samples[first].at_s
    if not kept or span <= 0:
        return Rates(None, None, 0.0, resets)
    arrived = sum(a for a, _, _ in kept)
    served = sum(s for _, s, _ in kept)
    return Rates(arrived / span, served / span, span, resets)


def oldest_age_s(now_ms: int, head_timestamps_ms: Iterable[int | None]) -> float | None:
    """Age of the oldest unconsumed record: now minus the earliest head timestamp, >= 0."""
    known = [ts for ts in head_timestamps_ms if ts is not None and ts >= 0]
    if not known:
        return None
    return max(0.0, (now_ms - min(known)) / 1000.0)

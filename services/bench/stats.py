"""Numbers a benchmark reports: steady-state throughput, percentiles, histograms."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from services.bench.loadgen import Completed


def steady_throughput(completed: Sequence[Completed], trim: float = 0.1) -> float:
    """Answers per second over the middle of the run (ramp-up and drain trimmed)."""
    times = sorted(c.received_s for c in completed)
    if len(times) < 10:
        return 0.0
    lo, hi = int(len(times) * trim), int(len(times) * (1 - trim)) - 1
    span = times[hi] - times[lo]
    return (hi - lo) / span if span > 0 else 0.0


def percentiles(values: Sequence[float]) -> dict[str, float | None]:
    """p50, p90 and p99 (None when empty)."""
    if not values:
        return {"p50": None, "p90": None, "p99": None}
    array = np.asarray(values, dtype=float)
    return {f"p{q}": float(np.percentile(array, q)) for q in (50, 90, 99)}


def batch_histogram(completed: Sequence[Completed]) -> dict[str, int]:
    """How many requests ran in batches of each size."""
    counts = Counter(c.batch_size for c in completed if c.batch_size is not None)
    return {str(size): counts[size] for size in sorted(counts)}


def statuses(completed: Sequence[Completed]) -> dict[str, int]:
    return dict(Counter(c.status for c in completed))


def window_bound(
    *, window: int, roundtrip_p50_ms: float | None, served_rps: float, cores_busy: float, cores: int
) -> str | None:
    """Why a closed loop's rate may not be the stack's ceiling, or None when the cores ran full.

    A closed loop with `window` requests outstanding serves at most window / round trip
    (Little's law). When the cores had room (under 90 % busy) and the rate is near that
    bound, the window set the rate, not the stack: a larger window measures the ceiling.
    """
    if roundtrip_p50_ms is None or roundtrip_p50_ms <= 0 or cores_busy >= 0.9 * cores:
        return None
    bound = window / (roundtrip_p50_ms / 1000)
    if served_rps < 0.7 * bound:
        return None
    return (
        f"the window, not the cores, set this rate: {cores_busy:.2f} of {cores} cores busy, "
        f"and {window} outstanding over a {roundtrip_p50_ms:.0f} ms round trip allow about "
        f"{bound:.0f} req/s (Little's law); run a larger --window to measure the ceiling"
    )

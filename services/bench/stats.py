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


MIN_WINDOW = 128
"""The fewest requests a saturation phase keeps outstanding by default."""


def saturation_window(*, workers: int, batches_in_hand: int, max_batch_size: int) -> int:
    """Requests a closed loop keeps outstanding by default: enough to fill all every
    worker takes in hand (`batches_in_hand` full batches: the engine's running and queued
    ones and its prefetched queue), at least `MIN_WINDOW`. Some of them are always riding
    the hops (ingest, the results, the client); the rest keep the engine's next batch in
    hand.

    Fewer leave an engine waiting for the bus between batches: two MiniLM workers on 2
    cores, each taking 4 batches of 32 in hand, read 0.79-0.82 of raw ONNX Runtime with
    128 outstanding and 0.85-0.90 with 256 (4 alternated pairs, docs/benchmarks.md
    "Stop 38"), the cores 1.85-1.91 busy against 1.90-1.94.
    """
    return max(MIN_WINDOW, workers * batches_in_hand * max_batch_size)


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

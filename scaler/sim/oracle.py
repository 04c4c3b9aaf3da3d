"""The oracle: the cheapest per-step (per-minute) static replica schedule that meets the SLO.

Computed offline with the whole future known, minute by minute: for each minute, the
fewest replicas (between the floor and the partition count) such that at least
`target` of the requests arriving in that minute finish within the SLO, serving the
minute's requests with the same batching and service-time model as the simulator and
carrying the replicas' busy state over from the previous minute. With `partitions` set
every replica serves only the partitions the live assignment gives it (the simulator's
`partition` queues); without, the group is one pooled FIFO. Replicas are assumed
ready when the minute starts and membership changes cost no rebalance pause, so the
oracle is a lower bound on the cost any real policy can reach.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np

from scaler.sim.group import IntArray, batching, form_batch, owners, partitions_of
from scaler.sim.params import ServiceModel
from scaler.sim.workload import FloatArray, TierArrivals


@dataclass(frozen=True)
class OracleSchedule:
    """Replicas per step, the resulting per-request e2e, and the cost."""

    step_s: float
    replicas: tuple[int, ...]
    e2e_s: FloatArray
    replica_seconds: float


def _serve(
    times: list[float],
    cum: list[float],
    lo: int,
    hi: int,
    free: list[float],
    *,
    service: ServiceModel,
) -> tuple[FloatArray, list[float]]:
    """Serve requests [lo, hi) FIFO on servers free at `free`: end times, new free times."""
    size, delay, a, b = batching(service)
    heap = list(free)
    heapq.heapify(heap)
    ends = np.empty(hi - lo)
    head = lo
    while head < hi:
        # The earliest-free server takes the next batch.
        start = max(heap[0], times[head])
        k, _, end = form_batch(times, cum, head, start, size=size, delay_s=delay, a_s=a, b_s=b)
        k = min(k, hi)
        ends[head - lo : k - lo] = end
        heapq.heapreplace(heap, end)
        head = k
    return ends, heap


def _serve_partitioned(
    times: FloatArray,
    units: FloatArray,
    owner_of: IntArray,
    span: tuple[int, int],
    free: list[float],
    *,
    service: ServiceModel,
) -> tuple[FloatArray, list[float]]:
    """Serve [lo, hi) = `span` with server i taking only its own requests (`owner_of`), FIFO."""
    size, delay, a, b = batching(service)
    lo, hi = span
    ends = np.empty(hi - lo)
    after = list(free)
    order = np.argsort(owner_of[lo:hi], kind="stable")
    counts = np.bincount(owner_of[lo:hi], minlength=len(free))
    at = 0
    for server, count in enumerate(counts.tolist()):
        own = order[at : at + count]
        at += count
        mine = times[lo + own].tolist()
        cum = np.concatenate(([0.0], np.cumsum(units[lo + own]))).tolist()
        head, ready = 0, after[server]
        while head < count:
            start = max(ready, mine[head])
            k, _, ready = form_batch(mine, cum, head, start, size=size, delay_s=delay, a_s=a, b_s=b)
            ends[own[head:k]] = ready
            head = k
        after[server] = ready
    return ends, after


def keep_servers(free: list[float], n: int, at: float, *, positional: bool) -> list[float]:
    """Keep n servers, add new ones free at `at`.

    Pooled, the n that free up first stay. Serving partitions, server i owns the
    partitions of member i, so its carried busy time belongs to that position: the first
    n stay, whatever they still have to finish.
    """
    kept = free[:n] if positional else sorted(free)[:n]
    return kept + [at] * (n - len(kept))


def oracle(
    arrivals: TierArrivals,
    service: ServiceModel,
    slo_p99_e2e_ms: float,
    duration_s: float,
    *,
    step_s: float,
    floor: int,
    cap: int,
    partitions: int | None = None,
    target: float = 0.99,
) -> OracleSchedule:
    """Greedy minute-by-minute search for the fewest replicas meeting `target` attainment.

    One tier alone, between `floor` and `cap`: the cluster's `max_total_replicas` is not
    applied (sharing it between tiers would take a joint search over every tier's minutes),
    so with a budget the tiers' schedules together may ask more than it allows."""
    times_arr = arrivals.times
    units = arrivals.tokens if service.per == "token" else np.ones_like(arrivals.tokens)
    cum = np.concatenate(([0.0], np.cumsum(units))).tolist()
    part = partitions_of(times_arr.size, partitions) if partitions else None
    owner_cache: dict[int, IntArray] = {}

    def serve(lo: int, hi: int, free: list[float]) -> tuple[FloatArray, list[float]]:
        if part is None or partitions is None:
            return _serve(times, cum, lo, hi, free, service=service)
        n = len(free)
        if n not in owner_cache:
            owner_cache[n] = owners(partitions, [str(i) for i in range(n)])[part]
        return _serve_partitioned(times_arr, units, owner_cache[n], (lo, hi), free, service=service)

    times = times_arr.tolist()
    slo_s = slo_p99_e2e_ms / 1000
    steps = max(1, math.ceil(duration_s / step_s))
    bounds = np.searchsorted(times_arr, np.arange(1, steps + 1) * step_s, side="left")
    bounds[-1] = times_arr.size
    e2e_all = np.empty(times_arr.size)
    free: list[float] = []
    schedule: list[int] = []
    n, lo = max(floor, 1), 0
    for m in range(steps):
        hi, at = int(bounds[m]), m * step_s

        def attempt(
            count: int, lo: int = lo, hi: int = hi, at: float = at, carried: list[float] = free
        ) -> tuple[bool, FloatArray, list[float]]:
            servers = keep_servers(carried, count, at, positional=part is not None)
            ends, after = serve(lo, hi, servers)
            e2e = ends - times_arr[lo:hi]
            ok = e2e.size == 0 or float(np.mean(e2e <= slo_s)) >= target
            return ok, e2e, after

        ok, e2e, after = attempt(n)
        if ok:
            while n > max(floor, 1):
                ok_less, e2e_less, after_less = attempt(n - 1)
                if not ok_less:
                    break
                n, e2e, after = n - 1, e2e_less, after_less
        else:
            while not ok and n < cap:
                n += 1
                ok, e2e, after = attempt(n)
        e2e_all[lo:hi] = e2e
        free, lo = after, hi
        schedule.append(n)
    last = duration_s - (steps - 1) * step_s
    cost = sum(schedule[:-1]) * step_s + schedule[-1] * last
    return OracleSchedule(
        step_s=step_s, replicas=tuple(schedule), e2e_s=e2e_all, replica_seconds=cost
    )

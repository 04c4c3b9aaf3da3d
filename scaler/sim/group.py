"""One simulated worker group: a FIFO tier topic served by batching replicas.

Arrivals are a sorted array consumed through a head index; replicas are servers with
a free-at time. Between control events (ticks, readiness, departures) the set of
consumers is fixed, so `advance` forms batches in a tight loop with O(1) work each
(prefix sums give a batch's units), which keeps an hour of trace to seconds.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from scaler.signals import GroupSignals
from scaler.sim.params import ServiceModel, SimParams
from scaler.sim.workload import FloatArray, TierArrivals
from schemas.topics import Tier


@dataclass
class Replica:
    """One simulated worker: started, ready from `ready_at`, busy until `free_at`."""

    started_at: float
    ready_at: float
    free_at: float
    leaving: bool = False
    gone_at: float | None = None


@dataclass(frozen=True)
class Batch:
    """Requests [lo, hi) closed at `close` and finished at `end`."""

    end: float
    lo: int
    hi: int
    close: float


class GroupSim:
    """Serving state of one group; mutable, owned by the simulation loop only."""

    def __init__(self, name: str, tier: Tier, arrivals: TierArrivals, params: SimParams) -> None:
        self.name, self.tier, self.params = name, tier, params
        self.service: ServiceModel = params.service
        self.times = arrivals.times
        units = arrivals.tokens if self.service.per == "token" else np.ones_like(arrivals.tokens)
        self.cum_units = np.concatenate(([0.0], np.cumsum(units)))
        self._times_list: list[float] = self.times.tolist()
        self._cum_list: list[float] = self.cum_units.tolist()
        n = self.times.size
        self.close_t: FloatArray = np.full(n, np.nan)
        self.end_t: FloatArray = np.full(n, np.nan)
        self.head = 0
        self.completed = 0
        self.replicas: list[Replica] = []
        self.pause_until = 0.0
        self._inflight: list[tuple[float, int, int, float]] = []
        self._done: deque[Batch] = deque()
        self._consumers: list[Replica] = []

    # --- membership ------------------------------------------------------------

    def active(self) -> list[Replica]:
        """Replicas that count as the group's current size (not leaving, not gone)."""
        return [r for r in self.replicas if not r.leaving and r.gone_at is None]

    def refresh_consumers(self, now: float) -> None:
        """Ready, staying replicas consume, at most one per partition (extras idle)."""
        ready = sorted((r for r in self.active() if r.ready_at <= now), key=lambda r: r.ready_at)
        self._consumers = ready[: self.params.partitions]

    def membership_changed(self, now: float) -> None:
        """A rebalance: every consumer of the group stops polling for the pause."""
        self.pause_until = max(self.pause_until, now + self.params.rebalance_pause_s)
        self.refresh_consumers(now)

    # --- serving ---------------------------------------------------------------

    def advance(self, until: float) -> None:
        """Form and run every batch that a consumer starts before `until`."""
        consumers = self._consumers
        if not consumers:
            return
        times, cum, n = self._times_list, self._cum_list, self.times.size
        size, delay, a, b = batching(self.service)
        head = self.head
        while head < n:
            replica = min(consumers, key=_free_at)
            start = max(replica.free_at, times[head], self.pause_until)
            if start >= until:
                break
            hi, close, end = form_batch(
                times, cum, head, start, size=size, delay_s=delay, a_s=a, b_s=b
            )
            self.close_t[head:hi] = close
            self.end_t[head:hi] = end
            replica.free_at = end
            heapq.heappush(self._inflight, (end, head, hi, close))
            head = hi
        self.head = head

    # --- what the collector would see -----------------------------------------

    def collect(self, now: float, arrival_window_s: float) -> GroupSignals:
        """Signals computed the way the collector does: offsets, histograms, registry."""
        while self._inflight and self._inflight[0][0] <= now:
            end, lo, hi, close = heapq.heappop(self._inflight)
            self._done.append(Batch(end, lo, hi, close))
            self.completed += hi - lo
        window = self.params.metrics_window_s
        while self._done and self._done[0].end <= now - window:
            self._done.popleft()
        arrived = int(np.searchsorted(self.times, now, side="right"))
        since = int(np.searchsorted(self.times, now - arrival_window_s, side="right"))
        lag = max(0, arrived - self.completed)
        oldest = [lo for _, lo, _, _ in self._inflight]
        if self.head < arrived:
            oldest.append(self.head)
        oldest_age_ms = 1000 * (now - float(self.times[min(oldest)])) if oldest and lag else 0.0
        active = self.active()
        ready = [r for r in active if r.ready_at <= now]
        stats = self._window_stats(now, window, ready)
        return GroupSignals(
            group=self.name,
            model="sim",
            tier=self.tier,
            replicas=len(active),
            ready_replicas=len(ready),
            starting_replicas=len(active) - len(ready),
            partitions=self.params.partitions,
            arrival_rps=(arrived - since) / arrival_window_s,
            lag=lag,
            oldest_age_ms=oldest_age_ms,
            slo_p99_e2e_ms=self.params.slo_p99_e2e_ms[self.tier],
            time_to_ready_s=self.params.time_to_ready_s,
            min_replicas=self.params.min_replicas,
            max_replicas=self.params.max_replicas,
            warm_replicas=self.params.warm_replicas,
            collected_at=now,
            **stats,
        )

    def _window_stats(self, now: float, window: float, ready: list[Replica]) -> dict[str, Any]:
        """p99s, throughput per busy second, batch size and utilization over the window."""
        start = now - window
        busy = sum(
            max(0.0, min(end, now) - max(close, start))
            for end, _, _, close in (*((d.end, 0, 0, d.close) for d in self._done), *self._inflight)
        )
        capacity = sum(
            max(0.0, now - max(r.ready_at, start)) for r in ready[: self.params.partitions]
        )
        utilization = min(1.0, busy / capacity) if capacity > 0 else None
        if not self._done:
            return {
                "utilization": utilization,
                "service_rps_per_replica": None,
                "achieved_batch_size": None,
                "queue_p99_ms": None,
                "engine_p99_ms": None,
                "e2e_p99_ms": None,
            }
        idx = np.concatenate([np.arange(d.lo, d.hi) for d in self._done])
        arrivals = self.times[idx]
        queue = self.close_t[idx] - arrivals
        e2e = self.end_t[idx] - arrivals
        engine = e2e - queue
        service_s = sum(d.end - d.close for d in self._done)
        return {
            "utilization": utilization,
            "service_rps_per_replica": idx.size / service_s if service_s > 0 else None,
            "achieved_batch_size": idx.size / len(self._done),
            "queue_p99_ms": 1000 * float(np.percentile(queue, 99)),
            "engine_p99_ms": 1000 * float(np.percentile(engine, 99)),
            "e2e_p99_ms": 1000 * float(np.percentile(e2e, 99)),
        }


def batching(service: ServiceModel) -> tuple[int, float, float, float]:
    """(max batch size, max queue delay s, a s, b s per unit) for `form_batch`."""
    return (
        service.max_batch_size,
        service.max_queue_delay_ms / 1000,
        service.a_ms / 1000,
        service.b_ms / 1000,
    )


def form_batch(
    times: Sequence[float],
    cum_units: Sequence[float],
    head: int,
    start: float,
    *,
    size: int,
    delay_s: float,
    a_s: float,
    b_s: float,
) -> tuple[int, float, float]:
    """A server free at `start` takes requests [head, hi): returns (hi, close, end).

    The batch closes when it is full or its first request has waited `delay_s`, and
    takes a + b·Σunits to run. Plain lists and `bisect` keep this hot path cheap.
    """
    stop = min(head + size, len(times))
    close = max(start, min(times[stop - 1], times[head] + delay_s))
    hi = bisect_right(times, close, head, stop)
    return hi, close, close + a_s + b_s * (cum_units[hi] - cum_units[head])


def _free_at(replica: Replica) -> float:
    return replica.free_at

"""One simulated worker group: a FIFO tier topic served by batching replicas.

Arrivals are a sorted array consumed through a head index; replicas are servers with
a free-at time. Between control events (ticks, readiness, departures) the set of
consumers is fixed, so `advance` forms batches in a tight loop with O(1) work each
(prefix sums give a batch's units), which keeps an hour of trace to seconds.

Membership changes pause the group in one of two ways (`SimParams.pause_model`):
`eager` stops every consumer for `rebalance_pause_s`; `incremental` pauses only the
partitions that change owner, for `handover_pause_s`. Each request carries a partition
(uniform, like a hash of its id); a change from n to m consumers moves |m - n| / max(m, n)
of the partitions, picked at random. The pool stays one FIFO: a request of a moved
partition that a consumer would take during the pause finishes that much later instead
(work is conserved; only its latency and the lag see the pause).
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from scaler.signals import GroupSignals
from scaler.sim.params import ServiceModel, SimParams
from scaler.sim.workload import FloatArray, TierArrivals
from schemas.topics import Tier


@dataclass
class Replica:
    """One simulated worker: started, warm from `ready_at`, consuming from `consume_from`.

    `consume_from` is None while the replica is a warm standby (loaded, not consuming).
    """

    started_at: float
    ready_at: float
    free_at: float
    consume_from: float | None
    leaving: bool = False
    gone_at: float | None = None

    @property
    def standby(self) -> bool:
        """Kept loaded but not consuming."""
        return self.consume_from is None


@dataclass(frozen=True)
class Batch:
    """Requests [lo, hi) closed at `close`, engine busy until `busy_end`, all done by `end`."""

    end: float
    lo: int
    hi: int
    close: float
    busy_end: float


@dataclass(frozen=True)
class Handover:
    """Partitions `moved` are not served from `start_s` until `end_s`."""

    start_s: float
    end_s: float
    moved: npt.NDArray[np.bool_]


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
        # Same partitions for every policy's run: a fixed seed, like fixed request ids.
        self._rng = np.random.default_rng(n)
        self.partition_of = self._rng.integers(0, params.partitions, n)
        self.handovers: list[Handover] = []
        self._members = 0
        self._inflight: list[tuple[float, int, int, float, float]] = []
        self._done: deque[Batch] = deque()
        self._consumers: list[Replica] = []

    # --- membership ------------------------------------------------------------

    def active(self) -> list[Replica]:
        """Replicas the group keeps now, consuming or standby (not leaving, not gone)."""
        return [r for r in self.replicas if not r.leaving and r.gone_at is None]

    def consuming_role(self) -> list[Replica]:
        """Replicas that consume or will once started: the group's size."""
        return [r for r in self.active() if not r.standby]

    def standby_role(self) -> list[Replica]:
        """Replicas kept loaded but not consuming (warming or warm)."""
        return [r for r in self.active() if r.standby]

    def start_with(self, count: int) -> None:
        """Begin with `count` replicas consuming at t=0 (no handover: nothing moved yet)."""
        for _ in range(count):
            self.replicas.append(Replica(0.0, ready_at=0.0, free_at=0.0, consume_from=0.0))
        self.refresh_consumers(0.0)
        self._members = len(self._consumers)

    def refresh_consumers(self, now: float) -> None:
        """Replicas past `consume_from` consume, at most one per partition (extras idle)."""
        ready = sorted(
            (r for r in self.consuming_role() if _consuming_at(r, now)), key=_consume_from
        )
        self._consumers = ready[: self.params.partitions]

    def membership_changed(self, now: float) -> None:
        """Consumers joined or left: pause the group (eager) or the moved partitions."""
        self.refresh_consumers(now)
        before, after = self._members, len(self._consumers)
        self._members = after
        if self.params.pause_model == "eager":
            self.pause_until = max(self.pause_until, now + self.params.rebalance_pause_s)
            return
        if after in (before, 0) or self.params.handover_pause_s <= 0:
            return
        partitions = self.params.partitions
        count = max(1, round(partitions * abs(after - before) / max(after, before)))
        moved = np.zeros(partitions, dtype=np.bool_)
        moved[self._rng.choice(partitions, count, replace=False)] = True
        self.handovers.append(Handover(now, now + self.params.handover_pause_s, moved))

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
            done = self._hand_over(head, hi, close, end) if self.handovers else end
            replica.free_at = end
            heapq.heappush(self._inflight, (done, head, hi, close, end))
            head = hi
        self.head = head

    def _hand_over(self, lo: int, hi: int, close: float, end: float) -> float:
        """Delay requests of moved partitions taken during a handover; when the batch is done."""
        while self.handovers and self.handovers[0].end_s <= self._times_list[lo]:
            # Ended before this request arrived: no later request can be caught by it.
            self.handovers.pop(0)
        done = end
        for h in self.handovers:
            if not h.start_s <= close < h.end_s:
                continue
            caught = h.moved[self.partition_of[lo:hi]]
            if caught.any():
                # Fetched by the new owner once the handover ends, then served as long.
                later = h.end_s + (end - close)
                closes, ends = self.close_t[lo:hi], self.end_t[lo:hi]
                closes[caught] = np.maximum(closes[caught], h.end_s)
                ends[caught] = np.maximum(ends[caught], later)
                done = max(done, later)
        return done

    # --- what the collector would see -----------------------------------------

    def collect(self, now: float, arrival_window_s: float) -> GroupSignals:
        """Signals computed the way the collector does: offsets, histograms, registry."""
        while self._inflight and self._inflight[0][0] <= now:
            end, lo, hi, close, busy_end = heapq.heappop(self._inflight)
            self._done.append(Batch(end, lo, hi, close, busy_end))
            self.completed += hi - lo
        window = self.params.metrics_window_s
        while self._done and self._done[0].end <= now - window:
            self._done.popleft()
        arrived = int(np.searchsorted(self.times, now, side="right"))
        since = int(np.searchsorted(self.times, now - arrival_window_s, side="right"))
        lag = max(0, arrived - self.completed)
        oldest = [lo for _, lo, _, _, _ in self._inflight]
        if self.head < arrived:
            oldest.append(self.head)
        oldest_age_ms = 1000 * (now - float(self.times[min(oldest)])) if oldest and lag else 0.0
        active = self.consuming_role()
        ready = [r for r in active if _consuming_at(r, now)]
        standby = self.standby_role()
        stats = self._window_stats(now, window, ready)
        return GroupSignals(
            group=self.name,
            model="sim",
            tier=self.tier,
            replicas=len(active),
            ready_replicas=len(ready),
            starting_replicas=len(active) - len(ready),
            standby_replicas=len(standby) if self.params.standby else None,
            standby_ready_replicas=sum(1 for r in standby if r.ready_at <= now),
            partitions=self.params.partitions,
            # The first windows are shorter than the window: divide by what was observed.
            arrival_rps=(arrived - since) / min(arrival_window_s, now) if now > 0 else None,
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
            for close, end in (
                *((d.close, d.busy_end) for d in self._done),
                *((i[3], i[4]) for i in self._inflight),
            )
        )
        capacity = sum(
            max(0.0, now - max(_consume_from(r), start)) for r in ready[: self.params.partitions]
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
        service_s = sum(d.busy_end - d.close for d in self._done)
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


def _consume_from(replica: Replica) -> float:
    return replica.consume_from if replica.consume_from is not None else float("inf")


def _consuming_at(replica: Replica, now: float) -> bool:
    """Warm, in the consuming role and past its handover."""
    return replica.ready_at <= now and _consume_from(replica) <= now

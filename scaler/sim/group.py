"""One simulated worker group: a tier topic's partitions served by batching replicas.

Arrivals are a sorted array; every request carries a partition (uniform, like a hash of
its id). Replicas are servers with a free-at time. Between control events (ticks,
readiness, departures) the set of consumers is fixed, so `advance` forms batches in a
tight loop that takes the consumer that can start first.

Who serves what (`SimParams.queues`):
- `partition` (default, what the live group does): every consumer owns the partitions
  `infra.assignment.balanced_assignment` gives it, as live, and serves only those, oldest
  first. A member with ⌈P/n⌉ partitions carries more than one with ⌊P/n⌋: uneven shares
  show up as that member's queue.
- `shared`: the group is one FIFO that every consumer serves (pooled; the ideal).

Membership changes pause the group in one of two ways (`SimParams.pause_model`):
`eager` stops every consumer for `rebalance_pause_s`; `incremental` pauses only the
partitions whose owner changed, for `handover_pause_s`. A request of a moved partition
that a consumer would take during the pause finishes that much later instead (work is
conserved; only its latency and the lag see the pause).
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

from infra.assignment import balanced_assignment
from scaler.signals import GroupSignals
from scaler.sim.params import ServiceModel, SimParams
from scaler.sim.workload import FloatArray, TierArrivals
from schemas.topics import Tier

IntArray = npt.NDArray[np.int64]


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
    member_id: str = ""
    """Its name in the partition assignment (the live instance id); the group names it."""

    @property
    def standby(self) -> bool:
        """Kept loaded but not consuming."""
        return self.consume_from is None


@dataclass(frozen=True)
class Batch:
    """Requests `idx` (global indices) closed at `close`, engine busy until `busy_end`."""

    end: float
    idx: range | IntArray
    close: float
    busy_end: float

    @property
    def first(self) -> int:
        """Its oldest request."""
        return int(self.idx[0])

    @property
    def selector(self) -> slice | IntArray:
        """Its requests as an index into the group's per-request arrays."""
        return slice(self.idx.start, self.idx.stop) if isinstance(self.idx, range) else self.idx

    def indices(self) -> IntArray:
        if isinstance(self.idx, range):
            return np.arange(self.idx.start, self.idx.stop)
        return self.idx


@dataclass(frozen=True)
class Handover:
    """Partitions `moved` are not served from `start_s` until `end_s`."""

    start_s: float
    end_s: float
    moved: npt.NDArray[np.bool_]


def partitions_of(requests: int, partitions: int) -> IntArray:
    """Each request's partition; fixed by the request count, like fixed request ids."""
    return np.random.default_rng(requests).integers(0, partitions, requests)


def owners(partitions: int, member_ids: Sequence[str]) -> IntArray:
    """Partition -> index into `member_ids` of its owner (-1: no member)."""
    owner = np.full(partitions, -1, dtype=np.int64)
    position = {m: i for i, m in enumerate(member_ids)}
    for member, owned in balanced_assignment(partitions, member_ids).items():
        owner[list(owned)] = position[member]
    return owner


class GroupSim:
    """Serving state of one group; mutable, owned by the simulation loop only."""

    def __init__(self, name: str, tier: Tier, arrivals: TierArrivals, params: SimParams) -> None:
        self.name, self.tier, self.params = name, tier, params
        self.service: ServiceModel = params.service
        self.times = arrivals.times
        units = arrivals.tokens if self.service.per == "token" else np.ones_like(arrivals.tokens)
        self.cum_units = np.concatenate(([0.0], np.cumsum(units)))
        self._units_list: list[float] = units.tolist()
        self._times_list: list[float] = self.times.tolist()
        self._cum_list: list[float] = self.cum_units.tolist()
        n = self.times.size
        self.close_t: FloatArray = np.full(n, np.nan)
        self.end_t: FloatArray = np.full(n, np.nan)
        self.completed = 0
        self.replicas: list[Replica] = []
        self.pause_until = 0.0
        self.partition_of = partitions_of(n, params.partitions)
        self.handovers: list[Handover] = []
        self._inflight: list[tuple[float, int, Batch]] = []
        self._done: deque[Batch] = deque()
        self._consumers: list[Replica] = []
        # Owner of every partition now and at the last membership change (member ids).
        self._owner: list[str | None] = [None] * params.partitions
        self._owner_at_change: list[str | None] = list(self._owner)
        # shared: one head over the arrivals.
        self.head = 0
        # partition: a head per partition, and per consumer a heap of (head time, partition).
        by_partition = [np.flatnonzero(self.partition_of == p) for p in range(params.partitions)]
        self._p_idx: list[list[int]] = [ix.tolist() for ix in by_partition]
        self._p_times: list[list[float]] = [self.times[ix].tolist() for ix in by_partition]
        self._p_head = [0] * params.partitions
        self._queues: dict[str, list[tuple[float, int]]] = {}
        self._named = 0
        self._members: dict[str, Replica] = {}

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
        self._owner_at_change = list(self._owner)

    def refresh_consumers(self, now: float) -> None:
        """Replicas past `consume_from` consume; partitions are spread over them as live."""
        ready = sorted(
            (r for r in self.consuming_role() if _consuming_at(r, now)), key=_consume_from
        )
        consumers = ready[: self.params.partitions]
        for r in consumers:
            if not r.member_id:
                self._named += 1
                r.member_id = f"{self.name}/{self._named}"
                self._members[r.member_id] = r
        if [r.member_id for r in consumers] == [r.member_id for r in self._consumers]:
            return
        self._consumers = consumers
        ids = [r.member_id for r in consumers]
        owner = owners(self.params.partitions, ids)
        self._owner = [ids[i] if i >= 0 else None for i in owner.tolist()]
        if self.params.queues == "partition":
            self._rebuild_queues(now)

    def _rebuild_queues(self, now: float) -> None:
        """Each consumer's heap of its partitions' oldest unserved requests."""
        self._queues = {r.member_id: [] for r in self._consumers}
        for p, member in enumerate(self._owner):
            head = self._p_head[p]
            if member is not None and head < len(self._p_times[p]):
                self._queues[member].append((self._p_times[p][head], p))
        for r in self._consumers:
            heapq.heapify(self._queues[r.member_id])
            # A partition it just got cannot be started before now.
            r.free_at = max(r.free_at, now)

    def membership_changed(self, now: float) -> None:
        """Consumers joined or left: pause the group (eager) or the moved partitions.

        As live, a partition's previous owner finishes its batch in flight before it lets
        the partition go: the pause of a moved partition runs from now until that owner is
        free, plus the handover (`handover_pause_s`), or the rebalance for the whole group.
        """
        self.refresh_consumers(now)
        before, self._owner_at_change = self._owner_at_change, list(self._owner)
        released = {
            p: self._released_at(b, now)
            for p, (a, b) in enumerate(zip(self._owner, before, strict=True))
            if a is not None and a != b
        }
        if self.params.pause_model == "eager":
            settled = max(released.values(), default=now)
            self.pause_until = max(self.pause_until, settled + self.params.rebalance_pause_s)
            return
        if self.params.handover_pause_s <= 0 or not released:
            return
        for settled in sorted(set(released.values())):
            moved = np.zeros(self.params.partitions, dtype=np.bool_)
            moved[[p for p, t in released.items() if t == settled]] = True
            self.handovers.append(Handover(now, settled + self.params.handover_pause_s, moved))
        self.handovers.sort(key=lambda h: h.end_s)

    def _released_at(self, previous_owner: str | None, now: float) -> float:
        """When a partition's previous owner is done with the batch it has in flight."""
        replica = self._members.get(previous_owner) if previous_owner else None
        return max(now, replica.free_at) if replica is not None else now

    def unserved_left(self) -> bool:
        """Some request has not been taken into a batch yet."""
        if self.params.queues == "shared":
            return self.head < self.times.size
        return any(h < len(t) for h, t in zip(self._p_head, self._p_times, strict=True))

    # --- serving ---------------------------------------------------------------

    def advance(self, until: float) -> None:
        """Form and run every batch that a consumer starts before `until`."""
        if not self._consumers:
            return
        if self.params.queues == "shared":
            self._advance_shared(until)
        else:
            self._advance_partitioned(until)

    def _advance_shared(self, until: float) -> None:
        consumers = self._consumers
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
            self._run(replica, Batch(end, range(head, hi), close, end), start)
            head = hi
        self.head = head

    def _advance_partitioned(self, until: float) -> None:
        size, delay, a, b = batching(self.service)
        p_idx, p_times, p_head, units = self._p_idx, self._p_times, self._p_head, self._units_list
        starts: list[tuple[float, int]] = []
        for k, r in enumerate(self._consumers):
            queue = self._queues[r.member_id]
            if queue:
                starts.append((max(r.free_at, queue[0][0], self.pause_until), k))
        heapq.heapify(starts)
        while starts and starts[0][0] < until:
            start, k = heapq.heappop(starts)
            replica = self._consumers[k]
            queue = self._queues[replica.member_id]
            limit = max(start, queue[0][0] + delay)
            taken: list[int] = []
            last = start
            while queue and len(taken) < size and queue[0][0] <= limit:
                last, p = queue[0]
                h = p_head[p]
                taken.append(p_idx[p][h])
                p_head[p] = h + 1
                if h + 1 < len(p_times[p]):
                    heapq.heapreplace(queue, (p_times[p][h + 1], p))
                else:
                    heapq.heappop(queue)
            close = max(start, last) if len(taken) == size else limit
            end = close + a + b * sum(units[i] for i in taken)
            self._run(replica, Batch(end, np.array(taken, dtype=np.int64), close, end), start)
            if queue:
                heapq.heappush(starts, (max(replica.free_at, queue[0][0], self.pause_until), k))

    def _run(self, replica: Replica, batch: Batch, start: float) -> None:
        """Record a formed batch: its requests' close and end, the handover's delay."""
        self.close_t[batch.selector] = batch.close
        self.end_t[batch.selector] = batch.end
        done = self._hand_over(batch, start) if self.handovers else batch.end
        replica.free_at = batch.end
        heapq.heappush(self._inflight, (done, batch.first, batch))

    def _hand_over(self, batch: Batch, start: float) -> float:
        """Delay requests of moved partitions taken during a handover; when the batch is done."""
        while self.handovers and self.handovers[0].end_s <= start:
            # Batches start in time order: no later batch can be caught by it.
            self.handovers.pop(0)
        done, close, end = batch.end, batch.close, batch.end
        idx = batch.indices()
        for h in self.handovers:
            if not h.start_s <= close < h.end_s:
                continue
            caught = h.moved[self.partition_of[idx]]
            if caught.any():
                # Fetched by the new owner once the handover ends, then served as long.
                later = h.end_s + (end - close)
                hit = idx[caught]
                self.close_t[hit] = np.maximum(self.close_t[hit], h.end_s)
                self.end_t[hit] = np.maximum(self.end_t[hit], later)
                done = max(done, later)
        return done

    # --- what the collector would see -----------------------------------------

    def _oldest_unserved(self, now: float) -> int | None:
        """Index of the oldest request that has arrived and is not in a batch yet."""
        if self.params.queues == "shared":
            waiting = self.head < self.times.size and self.times[self.head] <= now
            return self.head if waiting else None
        heads = [
            self._p_idx[p][h]
            for p, h in enumerate(self._p_head)
            if h < len(self._p_times[p]) and self._p_times[p][h] <= now
        ]
        return min(heads) if heads else None

    def collect(self, now: float, arrival_window_s: float) -> GroupSignals:
        """Signals computed the way the collector does: offsets, histograms, registry."""
        while self._inflight and self._inflight[0][0] <= now:
            _, _, batch = heapq.heappop(self._inflight)
            self._done.append(batch)
            self.completed += len(batch.idx)
        window = self.params.metrics_window_s
        while self._done and self._done[0].end <= now - window:
            self._done.popleft()
        arrived = int(np.searchsorted(self.times, now, side="right"))
        since = int(np.searchsorted(self.times, now - arrival_window_s, side="right"))
        lag = max(0, arrived - self.completed)
        oldest = [first for _, first, _ in self._inflight]
        unserved = self._oldest_unserved(now)
        if unserved is not None:
            oldest.append(unserved)
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
            max(0.0, min(b.busy_end, now) - max(b.close, start))
            for b in (*self._done, *(i[2] for i in self._inflight))
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
        idx = np.concatenate([d.indices() for d in self._done])
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

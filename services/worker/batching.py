"""Dynamic batching: per-(tier, length bucket) queues closed by size or queue delay.

Pure: the caller passes the clock. Strict tier priority (critical, interactive, batch),
with a starvation bound so the batch tier still moves under constant interactive load.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from schemas.topics import TIERS, Tier

PRIORITY: dict[Tier, int] = {tier: rank for rank, tier in enumerate(TIERS)}
Item = TypeVar("Item")


@dataclass(frozen=True)
class BatchPolicy:
    """When a queue becomes a batch."""

    max_batch_size: int
    max_queue_delay_s: float
    preferred_batch_sizes: tuple[int, ...] = ()
    length_buckets: tuple[int, ...] = ()
    starvation_s: float = 1.0


@dataclass
class Entry(Generic[Item]):
    """One request waiting in a queue."""

    item: Item
    tier: Tier
    samples: int
    length: int | None
    enqueued_at: float


@dataclass(frozen=True)
class Batch(Generic[Item]):
    """Requests that run together; `pad_length` is the bucket's bound (None: no padding)."""

    tier: Tier
    bucket: int | None
    pad_length: int | None
    entries: list[Entry[Item]]
    formed_at: float

    @property
    def samples(self) -> int:
        return sum(entry.samples for entry in self.entries)


@dataclass
class _Queue(Generic[Item]):
    tier: Tier
    bucket: int | None
    entries: deque[Entry[Item]] = field(default_factory=deque)
    samples: int = 0


def bucket_of(length: int | None, buckets: tuple[int, ...]) -> int | None:
    """Index of the smallest bucket bound ≥ length; None when there are no buckets."""
    if length is None or not buckets:
        return None
    index = bisect.bisect_left(buckets, length)
    return min(index, len(buckets) - 1)


def padded_length(longest: int | None, buckets: tuple[int, ...]) -> int | None:
    """What a batch whose longest request is `longest` is padded to: its bucket's bound, or
    its own length when that is beyond the last bound; None without buckets."""
    bucket = bucket_of(longest, buckets)
    if bucket is None or longest is None:
        return None
    return max(buckets[bucket], longest)


class Batcher(Generic[Item]):
    """Queues requests and hands out the next due batch."""

    def __init__(self, policy: BatchPolicy) -> None:
        self.policy = policy
        self._queues: dict[tuple[Tier, int | None], _Queue[Item]] = {}

    def __len__(self) -> int:
        return sum(len(q.entries) for q in self._queues.values())

    def queued_samples(self, tier: Tier) -> int:
        """Samples of `tier` waiting for a batch."""
        return sum(q.samples for q in self._queues.values() if q.tier == tier)

    def add(self, item: Item, *, tier: Tier, samples: int, length: int | None, now: float) -> None:
        """Queue one request of `samples` samples and sequence `length`."""
        bucket = bucket_of(length, self.policy.length_buckets)
        key = (tier, bucket)
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = _Queue(tier, bucket)
        queue.entries.append(Entry(item, tier, samples, length, now))
        queue.samples += samples

    def next_due_in(self, now: float, *, full_only: bool = False) -> float | None:
        """Seconds until some queue is due (0 = now), or None when all are empty.

        `full_only` (as in `next_batch`): only a full queue is due, and a partial one becomes
        due by filling (a poll) or by the engine freeing, not by time: None unless full.
        """
        queues = [q for q in self._queues.values() if q.entries]
        if full_only:
            queues = [q for q in queues if q.samples >= self.policy.max_batch_size]
        waits = [self._due_in(q, now) for q in queues]
        return min(waits) if waits else None

    def _due_in(self, queue: _Queue[Item], now: float) -> float:
        if queue.samples >= self.policy.max_batch_size:
            return 0.0
        waited = now - queue.entries[0].enqueued_at
        return max(self.policy.max_queue_delay_s - waited, 0.0)

    def next_batch(self, now: float, *, full_only: bool = False) -> Batch[Item] | None:
        """The most urgent due batch, or None when nothing is due yet.

        `full_only`: only a queue holding a full batch counts (a batch that would wait
        behind a running one gains nothing from leaving early).
        """
        due = [q for q in self._queues.values() if q.entries and self._due_in(q, now) == 0.0]
        if full_only:
            due = [q for q in due if q.samples >= self.policy.max_batch_size]
        if not due:
            return None
        queue = min(due, key=lambda q: self._rank(q, now))
        return self._take(queue, now)

    def _rank(self, queue: _Queue[Item], now: float) -> tuple[int, float]:
        head = queue.entries[0]
        starved = now - head.enqueued_at >= self.policy.starvation_s
        return (-1 if starved else PRIORITY[queue.tier], head.enqueued_at)

    def _take(self, queue: _Queue[Item], now: float) -> Batch[Item]:
        limit = self._target_size(queue.samples)
        taken: list[Entry[Item]] = []
        total = 0
        while queue.entries:
            head = queue.entries[0]
            if taken and total + head.samples > limit:
                break
            taken.append(queue.entries.popleft())
            total += head.samples
        queue.samples -= total
        pad = None
        if queue.bucket is not None:
            longest = max((e.length or 0) for e in taken)
            pad = padded_length(longest, self.policy.length_buckets)
        return Batch(queue.tier, queue.bucket, pad, taken, now)

    def _target_size(self, available: int) -> int:
        cap = min(available, self.policy.max_batch_size)
        fitting = [size for size in self.policy.preferred_batch_sizes if size <= cap]
        return max(fitting) if fitting else cap

    def remove(self, where: Callable[[Item], bool]) -> list[Item]:
        """Drop queued items matching `where(item)`; returns them (used on partition revoke)."""
        dropped: list[Item] = []
        for queue in self._queues.values():
            kept: deque[Entry[Item]] = deque()
            for entry in queue.entries:
                if where(entry.item):
                    dropped.append(entry.item)
                    queue.samples -= entry.samples
                else:
                    kept.append(entry)
            queue.entries = kept
        return dropped

    def drain_all(self) -> list[Item]:
        """Everything queued, oldest first per queue; the queues are emptied."""
        items = [entry.item for q in self._queues.values() for entry in q.entries]
        self._queues.clear()
        return items

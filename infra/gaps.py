"""Read each partition in offset order on a broker that can show a batch out of order.

Tansu 0.6 (the embedded broker) can make a record batch readable only after a later batch
of the same partition was already returned to a reader: several producers, or one with
several batches in flight, write one partition; the reader's position passes the batch
that is not readable yet, and a reader that moves on never sees it
(`scripts/probe_tail_reader.py`: 2-10 of 9,600 records missed per try). Apache Kafka
appends in offset order, so this never happens there.

The sign is a gap in the offsets a fetch returns. `GapGuard` (pure) holds back what follows
a gap and has the reader read again from the gap's start, until the gap fills or has
stood for `wait_s`; then the reader moves past it. A gap that stands is normal on Kafka
(transaction markers, compacted records), so the wait is short: what it costs there is
one re-read per gap, at most `wait_s` late. And a gap whose next record was written long
before it is read (`HISTORIC_GAP_S`) is history, not a batch still arriving: it is passed
at once, so reading a compacted topic (the registry, the rollouts) from its start on Kafka
does not wait `wait_s` at every compacted-away record.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from aiokafka import TopicPartition

log = logging.getLogger(__name__)

GAP_WAIT_S = 0.3
"""How long a gap may stand before the reader moves past it (Tansu fills one in ms)."""

HISTORIC_GAP_S = 10.0
"""A gap followed by a record written at least this long before it is read is passed at
once: a batch that is not readable yet is behind records written moments ago."""


class HasOffset(Protocol):
    @property
    def offset(self) -> int: ...


R = TypeVar("R", bound=HasOffset)


@dataclass(frozen=True)
class Admitted(Generic[R]):
    """What to hand on of a partition's fetched records, and where to read again from."""

    records: Sequence[R]
    seek_to: int | None = None
    """Read the partition again from here (the start of a gap); None: read on."""


@dataclass
class GapGuard:
    """Per partition, the next offset expected and the gap waited on (pure; `now` given)."""

    wait_s: float = GAP_WAIT_S
    wall_clock: Callable[[], float] = time.time
    """Epoch seconds, to age the record after a gap (its timestamp is epoch ms)."""
    _next: dict[TopicPartition, int] = field(default_factory=dict)
    _waiting: dict[TopicPartition, tuple[int, float]] = field(default_factory=dict)
    gaps_filled: int = 0
    """Gaps that filled on a re-read: records a plain reader would have missed."""
    gaps_passed: int = 0
    """Gaps that stood for `wait_s` and were passed."""
    gaps_historic: int = 0
    """Gaps passed at once: the record after them was old (compaction, markers)."""

    def admit(self, tp: TopicPartition, records: Sequence[R], now: float) -> Admitted[R]:
        """The records to hand on, in offset order, up to the first gap still waited on."""
        if not records:
            return Admitted(records)
        expected = self._next.get(tp)
        first, last = records[0].offset, records[-1].offset
        if expected is None or first < expected:
            # First read, or the reader was moved back (a broker that lost its log, a
            # seek elsewhere): whatever comes first sets the order.
            expected = first
        if first == expected and last - first + 1 == len(records):
            return self._through(tp, records, last)
        kept: list[R] = []
        for record in records:
            offset = record.offset
            if offset < expected:
                continue  # a repeat within one fetch (no broker should): handed on already
            if offset > expected and self._historic(record):
                self.gaps_historic += 1
                self._waiting.pop(tp, None)
            elif offset > expected and not self._passable(tp, expected, now):
                self._next[tp] = expected
                return Admitted(kept, seek_to=expected)
            elif offset > expected:
                self.gaps_passed += 1
                self._waiting.pop(tp, None)
            kept.append(record)
            expected = offset + 1
        return self._through(tp, kept, expected - 1)

    def _through(self, tp: TopicPartition, records: Sequence[R], last: int) -> Admitted[R]:
        waited = self._waiting.pop(tp, None)
        if waited is not None and records and records[0].offset == waited[0]:
            self.gaps_filled += 1
        self._next[tp] = last + 1
        return Admitted(records)

    def _historic(self, after_gap: R) -> bool:
        written_ms = getattr(after_gap, "timestamp", None)
        if not isinstance(written_ms, int) or written_ms <= 0:
            return False
        return self.wall_clock() - written_ms / 1000 >= HISTORIC_GAP_S

    def _passable(self, tp: TopicPartition, start: int, now: float) -> bool:
        waited = self._waiting.get(tp)
        if waited is None or waited[0] != start:
            self._waiting[tp] = (start, now)
            return False
        return now - waited[1] >= self.wait_s

    def forget(self, *tps: TopicPartition) -> None:
        """The reader was moved (assigned, sought): no order is expected of these any more."""
        for tp in tps:
            self._next.pop(tp, None)
            self._waiting.pop(tp, None)


class Seeker(Protocol):
    def seek(self, partition: TopicPartition, offset: int) -> None: ...


def admit_in_order(
    consumer: Seeker,
    guard: GapGuard,
    batches: Mapping[TopicPartition, list[Any]],
    now: float,
) -> dict[TopicPartition, list[Any]]:
    """`getmany`'s batches with what follows a gap held back; the consumer reads each
    held-back partition again from its gap."""
    out: dict[TopicPartition, list[Any]] = {}
    for tp, records in batches.items():
        passed = guard.gaps_passed
        admitted = guard.admit(tp, records, now)
        if guard.gaps_passed != passed:
            log.warning(
                "event=offset_gap_passed topic=%s partition=%d wait_s=%.1f (no record there)",
                tp.topic,
                tp.partition,
                guard.wait_s,
            )
        if admitted.seek_to is not None:
            log.debug(
                "event=offset_gap_reread topic=%s partition=%d from=%d",
                tp.topic,
                tp.partition,
                admitted.seek_to,
            )
            consumer.seek(tp, admitted.seek_to)
        kept = admitted.records
        if kept:
            out[tp] = kept if isinstance(kept, list) else list(kept)
    return out


async def getmany_in_order(
    consumer: Any, guard: GapGuard, *, timeout_ms: int
) -> dict[TopicPartition, list[Any]]:
    """`consumer.getmany(timeout_ms=...)` read through `guard` (see `admit_in_order`)."""
    fetched = await consumer.getmany(timeout_ms=timeout_ms)
    return admit_in_order(consumer, guard, fetched, time.monotonic())

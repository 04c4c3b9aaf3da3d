"""Reads and writes the scalers' lease log (`scaler/lease.py` decides from what it reads).

A `LeaseKeeper` tails `inferbus.scaler.lease` from its last records, claims the lease when
`claimable` says it may, and while it holds it renews it and watches for the moment it must
stop acting (`lost`): no renewal of its own read back for `FENCE_SHARE` of the lease, or a
newer term's claim read from the log. It releases the lease at a clean stop. Every record
goes to partition 0, the one it reads, whatever partitions the topic was made with.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from aiokafka import TopicPartition
from aiokafka.errors import KafkaError

from infra.feed import LOG_END_CHECK_S
from infra.gaps import GapGuard, getmany_in_order
from infra.kafka import make_consumer, make_producer, start_with_retry, stop_producer_within
from infra.log_end import LogEndProbe, rewind_restarted_logs
from infra.tasks import cancel_and_wait, say_failure, wait_event
from infra.topics import TopicSpec, ensure_topics
from scaler.lease import (
    FENCE_SHARE,
    RENEW_SHARE,
    LeaseKind,
    LeaseRecord,
    LeaseView,
    began_again,
    claimable,
    fenced,
    fold,
    reading_from,
    record_from_json,
    record_to_json,
)
from schemas.errors import InferbusError
from schemas.topics import SCALER_LEASE

log = logging.getLogger(__name__)

PAST_RECORDS = 64
"""How many of the log's last records a starting keeper reads: the holder renews every
few seconds, so they hold its newest renewal and any claim since."""

READ_WAIT_MS = 200
"""The longest one read of the log waits for a record."""

WATCH_EVERY_S = 0.2
"""How often the holder checks whether it must stop acting."""

RELEASE_WAIT_S = 2.0
"""How long a clean stop waits for its release to be acknowledged."""

_KEY = b"lease"


class LeaseError(InferbusError):
    """The lease log cannot be used: the scaler cannot tell whether it may act."""


class LeaseKeeper:
    """One scaler's side of the lease: `acquire` waits until it holds it, `lost` is set
    when it must stop acting, `release` gives it up."""

    def __init__(
        self,
        bootstrap: str,
        *,
        holder: str,
        lease_s: float,
        topic: str = SCALER_LEASE,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.bootstrap = bootstrap
        self.holder = holder
        self.lease_s = lease_s
        self.topic = topic
        self.view = LeaseView()
        self.lost = asyncio.Event()
        """Set when the holder must stop acting; cleared by the next `acquire`."""
        self.unreadable = 0
        """Records of the log that are no lease record (left out, said once)."""
        self._clock, self._wall = clock, wall
        self._tp = TopicPartition(topic, 0)
        self._consumer = make_consumer(
            bootstrap=bootstrap,
            group_id=None,
            client_id="inferbus-scaler-lease",
            fetch_max_wait_ms=READ_WAIT_MS,
        )
        self._producer = make_producer(bootstrap, client_id="inferbus-scaler-lease")
        self._log_ends = LogEndProbe(bootstrap, client_id="inferbus-scaler-lease")
        self._gaps = GapGuard()
        self._caught_up_at: float | None = None
        self._read = asyncio.Event()
        """Set after each read that changed the view (waiters clear it)."""
        self._term: int | None = None
        """The term this keeper holds, None while it holds none."""
        self._acked_sent_at: float | None = None
        """When this keeper sent its newest claim or renewal read back still naming it."""
        self._sent: dict[float, float] = {}
        """Its claims and renewals not read back yet: `written_at` → when sent (monotonic)."""
        self._next_offset = 0
        """The offset after the newest record read."""
        self._tasks: list[asyncio.Task[None]] = []
        self._holding: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        """Make the log if it is missing (installations from before the lease lack it),
        and start reading it from its last records."""
        await start_with_retry(self._consumer.start, what="scaler-lease-reader")
        try:
            await ensure_topics(self.bootstrap, [TopicSpec(self.topic, 1)])
        except KafkaError as exc:
            raise LeaseError(
                f"cannot make the lease topic {self.topic} ({type(exc).__name__}): make it "
                "with `inferbus topics create` (as a principal that may create topics), or "
                "run a single scaler without a lease (INFERBUS_SCALER_LEASE_S=0)"
            ) from exc
        await start_with_retry(self._producer.start, what="scaler-lease-writer")
        self._consumer.assign([self._tp])
        first = (await self._consumer.beginning_offsets([self._tp]))[self._tp]
        end = (await self._consumer.end_offsets([self._tp]))[self._tp]
        start = max(first, end - PAST_RECORDS)
        self._consumer.seek(self._tp, start)
        self.view = reading_from(start)
        self._next_offset = start
        self._tasks.append(asyncio.create_task(self._reading(end), name="scaler-lease-reader"))

    async def _reading(self, end: int) -> None:
        """Fold every record into the view; those before `end` are the log's past."""
        caught_up = end == 0
        if caught_up:
            self._caught_up_at = self._clock()
        checked_at = self._clock()
        while True:
            # In offset order: on Tansu a batch can become readable only after a later one
            # was returned, and a claim read past would leave this reader's view its own.
            batches = await getmany_in_order(self._consumer, self._gaps, timeout_ms=READ_WAIT_MS)
            for message in batches.get(self._tp, []):
                self._fold(message.value, live=caught_up)
                self._next_offset = message.offset + 1
                if not caught_up and message.offset + 1 >= end:
                    caught_up = True
            if not caught_up and not batches:
                caught_up = True  # an empty read: Tansu's end offset may be short of the log's
            if caught_up and self._caught_up_at is None:
                self._caught_up_at = self._clock()
            if batches:
                self._read.set()
            self._check_holding()
            if self._clock() - checked_at >= min(LOG_END_CHECK_S, self.lease_s * RENEW_SHARE):
                checked_at = self._clock()
                if await rewind_restarted_logs(self._consumer, self._log_ends, what="lease"):
                    # The broker began the log again: the holder known is kept, heard now.
                    self.view = began_again(self.view, now=self._clock())
                    self._next_offset = 0
                    self._gaps.forget(self._tp)

    def _fold(self, value: bytes | None, *, live: bool) -> None:
        record = record_from_json(value)
        if isinstance(record, str):
            self.unreadable += 1
            if self.unreadable == 1:
                log.warning("event=lease_record_unreadable why=%r (left out)", record)
            return
        self.view = fold(self.view, record, heard_at=self._clock() if live else None)
        if record.holder != self.holder:
            return
        sent_at = self._sent.pop(record.written_at, None)
        if sent_at is not None and self._holds(record.term):
            # Its own claim or renewal read back, still naming it: the fence counts from
            # its sending (`fenced`).
            self._acked_sent_at = max(self._acked_sent_at or sent_at, sent_at)

    def _holds(self, term: int) -> bool:
        return self._term == term and self.view.holder == self.holder and self.view.term == term

    async def acquire(self, stop: asyncio.Event) -> bool:
        """Wait until this keeper holds the lease (True), or until `stop` (False)."""
        said: tuple[str | None, int] | None = None
        while not stop.is_set():
            self._raise_if_reader_died()
            if self._caught_up_at is not None and self._claimable():
                # Only what the log held when the broker was asked may say it ran out: a
                # reader that stalled (or a process that was paused) has not read it yet.
                ready = await self._read_to_end() and self._claimable()
                if ready and await self._claim(self.view.term + 1, stop):
                    return True
            elif self._caught_up_at is not None and said != (self.view.holder, self.view.term):
                said = (self.view.holder, self.view.term)
                log.info(
                    "event=scaler_standby holder=%s term=%d (%s)",
                    self.view.holder,
                    self.view.term,
                    _waits_why(self.view.holder, self.holder),
                )
            self._read.clear()
            await wait_event(self._read, min(1.0, self.lease_s * RENEW_SHARE / 2))
        return False

    def _claimable(self) -> bool:
        assert self._caught_up_at is not None
        return claimable(
            self.view,
            now=self._clock(),
            wall_now=self._wall(),
            caught_up_at=self._caught_up_at,
            lease_s=self.lease_s,
        )

    def _raise_if_reader_died(self) -> None:
        if self._tasks and self._tasks[0].done():
            self._tasks[0].result()  # its error ends the wait, raised once (and said by run)
            raise LeaseError("the lease log's reader stopped")

    async def _read_to_end(self) -> bool:
        """Read the log up to the end the broker reports now; False (said) where that takes
        longer than a renewal's time."""
        try:
            async with asyncio.timeout(self.lease_s * RENEW_SHARE):
                end = (await self._consumer.end_offsets([self._tp]))[self._tp]
                while self._next_offset < end:
                    self._read.clear()
                    await wait_event(self._read, READ_WAIT_MS / 1000)
        except (KafkaError, TimeoutError) as exc:
            log.warning("event=lease_read_behind error=%r (no claim this time)", exc)
            return False
        return True

    async def _claim(self, term: int, stop: asyncio.Event) -> bool:
        """Claim `term`; True where the log's order gave it to this keeper. A claim not read
        back (a stop came first, or the reader is behind) is released, in case it won."""
        sent_at = self._clock()
        written_at = self._wall()
        self._forget_sent_before(sent_at - self.lease_s)
        self._sent[written_at] = sent_at
        if not await self._send("claim", term, written_at):
            await asyncio.sleep(min(1.0, self.lease_s * RENEW_SHARE))
            return False
        await self._read_until(lambda: self.view.term >= term, self.lease_s, stop)
        if self.view.term < term:
            # Not read back (a stop, or a reader behind for a whole lease): it may have won.
            # A release of it frees the lease at once then, and changes nothing where
            # another claim came first.
            why = "stopping" if stop.is_set() else "not read back within the lease"
            log.info("event=lease_claim_abandoned term=%d why=%r", term, why)
            await self._send("release", term, self._wall())
            return False
        if self.view.holder != self.holder or self.view.term != term:
            log.info("event=lease_claim_lost term=%d holder=%s", term, self.view.holder)
            return False
        self._term, self._acked_sent_at = term, sent_at
        self.lost.clear()
        self._holding = [
            asyncio.create_task(self._renewing(term, sent_at), name="scaler-lease-renew"),
            asyncio.create_task(self._watching(), name="scaler-lease-watch"),
        ]
        for task in self._holding:
            say_failure(task, log)
        log.info("event=lease_taken term=%d lease_s=%g", term, self.lease_s)
        return True

    async def _renewing(self, term: int, sent_at: float) -> None:
        """Renew every `RENEW_SHARE` of the lease, counted from each renewal's sending (a
        slow acknowledgement does not push the next one back)."""
        while True:
            await asyncio.sleep(max(0.0, sent_at + self.lease_s * RENEW_SHARE - self._clock()))
            sent_at = self._clock()
            written_at = self._wall()
            self._forget_sent_before(sent_at - self.lease_s)
            self._sent[written_at] = sent_at
            await self._send("renew", term, written_at)

    def _forget_sent_before(self, at: float) -> None:
        """Drop records sent before `at` never read back (the fence is long past them)."""
        self._sent = {w: t for w, t in self._sent.items() if t >= at}

    async def _send(self, kind: LeaseKind, term: int, written_at: float) -> bool:
        """Write one record; False (said) where the broker did not acknowledge it in time."""
        record = LeaseRecord(kind, self.holder, term, self.lease_s, written_at)
        try:
            async with asyncio.timeout(self.lease_s * FENCE_SHARE):
                await self._producer.send_and_wait(
                    self.topic, record_to_json(record), key=_KEY, partition=0
                )
        except (KafkaError, TimeoutError) as exc:
            log.warning("event=lease_write_failed kind=%s term=%d error=%r", kind, term, exc)
            return False
        return True

    def _check_holding(self) -> None:
        """Set `lost` where the holder must stop acting: a newer term read, no renewal read
        back for `FENCE_SHARE` of the lease, or the log's reader stopped."""
        term = self._term
        if term is None:
            return
        why = None
        if self.view.holder != self.holder or self.view.term != term:
            why = f"term {self.view.term} is {self.view.holder}'s"
        elif fenced(self._acked_sent_at, now=self._clock(), lease_s=self.lease_s):
            why = "no renewal written and read back within its share of the lease"
        elif self._tasks and self._tasks[0].done():
            why = "the lease log's reader stopped"
        if why is not None:
            log.warning("event=lease_lost term=%d why=%r (this scaler stops acting)", term, why)
            self._let_go()
            self.lost.set()

    def _let_go(self) -> None:
        self._term = None
        for task in self._holding:
            task.cancel()
        self._holding = []

    async def _watching(self) -> None:
        """Check for the lost lease between reads too: the reader can wait on a broker that
        went away for longer than the fence allows."""
        while True:
            await asyncio.sleep(WATCH_EVERY_S)
            self._check_holding()

    async def release(self) -> int | None:
        """Give the lease up (a clean stop): a standby takes it at once. Said if the broker
        does not acknowledge it; the lease then runs out instead. Returns the term given up
        (None where it held none, or the release was not written)."""
        term = self._term
        self._let_go()
        if term is None:
            return None
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(RELEASE_WAIT_S):
                if await self._send("release", term, self._wall()):
                    log.info("event=lease_released term=%d", term)
                    return term
        log.warning("event=lease_release_unsent term=%d (it runs out instead)", term)
        return None

    async def taken_after(self, term: int, within_s: float) -> str | None:
        """The scaler that took a term after `term` (a standby taking the lease this one
        released), waited for up to `within_s`; None where none had by then."""
        if await self._read_until(
            lambda: self.view.term > term and self.view.holder not in (None, self.holder),
            within_s,
        ):
            return self.view.holder
        return None

    async def _read_until(
        self, done: Callable[[], bool], within_s: float, stop: asyncio.Event | None = None
    ) -> bool:
        """Wait, read by read, until `done()` (True), or `within_s` passed or `stop` was
        set first (False)."""
        until = self._clock() + within_s
        while not done():
            left = until - self._clock()
            if left <= 0 or (stop is not None and stop.is_set()):
                return False
            self._read.clear()
            await wait_event(self._read, min(left, READ_WAIT_MS / 1000))
        return True

    async def close(self) -> None:
        """Stop reading and writing (`release` first for a clean stop)."""
        self._let_go()
        for task in self._tasks:
            await cancel_and_wait(task)
        self._tasks = []
        await self._consumer.stop()
        await stop_producer_within(self._producer, RELEASE_WAIT_S)
        await self._log_ends.close()


def _waits_why(holder: str | None, me: str) -> str:
    if holder is None:
        return "a log that names no holder yet: it claims after one renewal's wait"
    if holder == me:
        return "this scaler's own term, no longer renewed: it claims the next when it runs out"
    return "it acts; this one waits to take over"

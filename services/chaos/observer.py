"""Reads every result and DLQ record from the moment it starts, through broker restarts."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import orjson
from aiokafka import ConsumerRecord, TopicPartition
from aiokafka.errors import KafkaError

from infra.gaps import GapGuard, getmany_in_order
from infra.kafka import make_consumer, start_with_retry
from infra.tasks import cancel_and_wait
from schemas import headers as h
from schemas.frames import FrameError
from schemas.topics import DLQ, RESULTS
from services.bench.loadgen import read_result
from services.chaos.events import digest
from services.chaos.ledger import Seen

log = logging.getLogger(__name__)
REFRESH_S = 1.0
"""How often the topics' partitions are looked up again (a restarted broker re-creates them)."""


class Observer:
    """A group-less consumer over the results and DLQ topics, recording `Seen` outcomes.

    Records are identified by (epoch, topic, partition, offset): a partition read twice
    (after a reassignment) is not counted twice, while a repeated result (another record)
    is. `broker_lost()` (once the broker is gone) starts a new epoch and stops reading;
    `broker_back()` reads every topic from its start, since a broker that kept no state
    numbers its offsets from 0 again.
    """

    def __init__(
        self,
        bootstrap: str,
        topics: Sequence[str] = (RESULTS, DLQ),
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._consumer = make_consumer(
            bootstrap=bootstrap, group_id=None, client_id="inferbus-chaos-observer"
        )
        self._topics = tuple(topics)
        self._clock = clock
        self._assigned: set[TopicPartition] = set()
        self._read: set[tuple[int, str, int, int]] = set()
        self._rewind = False
        self._paused = False
        self._task: asyncio.Task[None] | None = None
        self.epoch = 0
        self.seen: list[Seen] = []
        self.unreadable = 0
        """Records on the results topic that are not results (counted, first few logged)."""
        self.errors: dict[str, int] = {}
        """Consumer errors by type name (a lost broker shows here)."""
        self.changed = asyncio.Event()

    async def start(self) -> None:
        """Connect and position at the end of every partition: only later outcomes count."""
        await start_with_retry(self._consumer.start, what="chaos-observer")
        await self._refresh(at_end=True)
        self._task = asyncio.create_task(self._run(), name="chaos-observer")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)
        await self._consumer.stop()

    def broker_lost(self) -> None:
        """The broker is gone: stop reading until `broker_back`, in a new epoch.

        The partitions are let go: a consumer asks the broker about the topics it is
        assigned, and Tansu creates a topic it is asked about (with 4 partitions). An
        observer must not be the one that re-creates the topics it watches.
        """
        self.epoch += 1
        self._paused = True
        self._consumer.assign([])
        self._assigned = set()

    def broker_back(self) -> None:
        """A broker without the old one's data is up: read every partition from the start."""
        self._paused = False
        self._rewind = True

    async def _partitions(self) -> set[TopicPartition]:
        # A lookup of all topics (which creates none) sees the topics a restarted broker
        # got back, with whatever partitions they have now; the consumer's own cluster
        # view refreshes only on its schedule.
        cluster = await self._consumer._client.fetch_all_metadata()
        found: set[TopicPartition] = set()
        for topic in self._topics:
            for partition in cluster.partitions_for_topic(topic) or ():
                found.add(TopicPartition(topic, partition))
        return found

    async def _refresh(self, *, at_end: bool = False) -> None:
        found = await self._partitions()
        if found == self._assigned:
            return
        positions = {tp: await self._consumer.position(tp) for tp in self._assigned & found}
        self._consumer.assign(sorted(found))
        new = sorted(found - self._assigned)
        if new:
            if at_end:
                await self._consumer.seek_to_end(*new)
                for tp in new:
                    await self._consumer.position(tp)
            else:
                await self._consumer.seek_to_beginning(*new)
        for tp, offset in positions.items():
            self._consumer.seek(tp, offset)
        self._assigned = found

    async def _run(self) -> None:
        next_refresh = 0.0
        gaps = GapGuard()
        while True:
            if self._paused:
                await asyncio.sleep(0.1)
                continue
            epoch = self.epoch
            try:
                if self._rewind:
                    # Cleared only once done: a broker still starting fails the lookup, and
                    # a rewind dropped then left the reader at the old logs' offsets, past
                    # the new ones' first records (Tansu returns nothing there, no error).
                    await self._refresh()
                    if self._assigned:
                        await self._consumer.seek_to_beginning(*self._assigned)
                    self._rewind = False
                if time.monotonic() >= next_refresh:
                    next_refresh = time.monotonic() + REFRESH_S
                    await self._refresh()
                batches = await getmany_in_order(self._consumer, gaps, timeout_ms=200)
            except KafkaError as exc:
                name = type(exc).__name__
                self.errors[name] = self.errors.get(name, 0) + 1
                if self.errors[name] == 1:
                    log.warning("event=chaos_observer_error error=%r (further ones counted)", exc)
                await asyncio.sleep(0.5)
                continue
            for records in batches.values():
                for record in records:
                    self._take(record, epoch)

    def _take(self, record: ConsumerRecord[bytes, bytes], epoch: int) -> None:
        coordinates = (epoch, record.topic, record.partition, record.offset)
        if coordinates in self._read:
            return
        self._read.add(coordinates)
        seen = self._dead_letter(record) if record.topic == DLQ else self._result(record)
        if seen is not None:
            self.seen.append(seen)
            self.changed.set()

    def _dead_letter(self, record: ConsumerRecord[bytes, bytes]) -> Seen:
        code = h.header(record.headers, h.ERROR_CODE) or "unknown"
        return Seen("dlq", digest(record.value or b""), code, self._clock())

    def _result(self, record: ConsumerRecord[bytes, bytes]) -> Seen | None:
        try:
            result: dict[str, Any] = read_result(record.value or b"")
            request_id, status = str(result["request_id"]), str(result["status"])
        except (orjson.JSONDecodeError, FrameError, KeyError, TypeError) as exc:
            self.unreadable += 1
            if self.unreadable <= 3:
                log.warning("event=chaos_unreadable_result offset=%d error=%r", record.offset, exc)
            return None
        worker = result.get("worker_id")
        return Seen("result", request_id, status, self._clock(), str(worker) if worker else None)

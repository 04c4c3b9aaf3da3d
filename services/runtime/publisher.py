"""Producing many records as a few record batches, retrying what failed."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import (
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    UnknownError,
)
from aiokafka.structs import RecordMetadata, TopicPartition

from infra.settings import kafka_settings
from infra.tasks import within
from schemas import headers as h
from schemas.topics import is_made_by_inferbus

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Outgoing:
    """One record to produce."""

    topic: str
    key: bytes | None
    value: bytes
    headers: h.Headers


class UnknownTopic(KafkaError):  # type: ignore[misc]
    """A record's topic does not exist (or the broker cannot be reached to say)."""

    retriable = True
    """A topic can come (back): the embedded broker's topics are re-created after a restart."""


class MissingTopic(UnknownTopic):
    """The broker answered and has no such topic, and it is not one inferbus makes itself
    (a producer's `reply_to` naming a topic nobody created, `inferbus.results.<x>`
    included): trying again cannot help."""

    retriable = False


class StalePartition(UnknownTopic):
    """A batch's partition is no longer among its topic's partitions when it is handed over:
    the topic came back with fewer while the batch waited its turn. Retried, planned on the
    producer's fresh metadata."""


def retriable(error: BaseException) -> bool:
    """Whether trying again later can succeed (aiokafka marks its errors so).

    UnknownError counts too: Tansu answers it for a topic it lost in a restart, and the
    topic comes back.
    """
    if isinstance(error, KafkaTimeoutError | KafkaConnectionError | UnknownError):
        return True
    return isinstance(error, KafkaError) and bool(getattr(error, "retriable", False))


def error_text(error: BaseException) -> str:
    """`Kind: message` for a failed send's error, once (aiokafka's errors put their class
    name in their text already: `MissingTopic: MissingTopic: …` otherwise)."""
    name, text = type(error).__name__, str(error)
    return text if text.startswith(name) else f"{name}: {text or 'no detail'}"


LAST_TRY_ACK_S = 2.0
"""The least time a try's acks are awaited, however little patience is left: a healthy
broker acks in milliseconds, a busy one within a second or two."""
LIST_AGAIN_S = 0.25
"""How soon the broker's topics are listed again while a named topic is not among them."""


MISSING_TOPICS_KEPT = 4096
"""Missing topics a publisher remembers at most: `reply_to` may name any
`inferbus.results.<x>`, and a flood of distinct names must not grow the memory without
bound (one forgotten is only listed again)."""


SPREADS_KEPT = 1024
"""Topics whose spread a publisher remembers: a worker answers into every reply topic its
clients name, and one forgotten starts even again."""


class RecordSpread:
    """Where one call's records for a topic go: each part to one of the partitions handed
    the fewest so far (ties round robin from the last one chosen). Pure.

    A call is one part unless `min_part` is set; then it is split in as many parts of at
    least `min_part` records as fit, at most one a partition, so every partition holds
    within a part of the others. Every part is a record batch more for the broker and the
    readers (split in parts of 16, the bus ceiling fell 15 %; of 64, 4 %), so only a
    publisher whose topic several consumers share in partitions, and whose calls are large,
    splits: ingest routing to the tier topics. One batch a call in turn had left the
    partitions as uneven as the calls: ingest routes a poll's records in one call, at
    saturation 128-256 of them, and the worker owning that partition held the backlog
    while the other idled (docs/benchmarks.md, "Stop 38").
    """

    def __init__(self, partitions: int, *, min_part: int | None = None) -> None:
        self.partitions = partitions
        self.min_part = min_part
        self._handed = [0] * partitions
        self._last = -1

    def plan(self, records: int) -> list[tuple[int, int]]:
        """(partition, records) parts for a call of `records`, counted as handed; split
        parts are within one record of each other in size."""
        parts = 1 if not self.min_part else max(1, min(self.partitions, records // self.min_part))
        order = [(self._last + 1 + k) % self.partitions for k in range(self.partitions)]
        chosen = sorted(order, key=self._handed.__getitem__)[:parts]
        size, extra = divmod(records, parts)
        out = [(partition, size + (1 if k < extra else 0)) for k, partition in enumerate(chosen)]
        for partition, count in out:
            self._handed[partition] += count
        self._last = chosen[-1]
        return out

    def give_back(self, partition: int, records: int) -> None:
        """`records` planned for `partition` did not land there (their batch failed, or a
        record fits no batch): they no longer count, so a retry is counted once, wherever it
        goes. A partition this spread does not have (the topic came back with fewer while
        the batch was out, and the spread started over) has nothing to give back."""
        if 0 <= partition < self.partitions:
            self._handed[partition] = max(self._handed[partition] - records, 0)


class MissingTopics:
    """Topics the broker said it does not have, each remembered for `memory_s` on `clock`,
    at most `kept` of them. Kept in the order found, so the expired leave from the front
    at every `add`, and past `kept` the oldest go first."""

    def __init__(
        self, memory_s: float, clock: Callable[[], float], *, kept: int = MISSING_TOPICS_KEPT
    ) -> None:
        self.memory_s = memory_s
        self.kept = kept
        self._clock = clock
        self._found_at: OrderedDict[str, float] = OrderedDict()
        """Topic -> when it was found missing, on `clock`; the oldest first."""

    def __len__(self) -> int:
        return len(self._found_at)

    def __contains__(self, topic: object) -> bool:
        """Whether `topic` is remembered, expired or not."""
        return topic in self._found_at

    def recent(self, topic: str) -> bool:
        """Whether `topic` was found missing less than `memory_s` ago; one found longer ago
        is forgotten."""
        found_at = self._found_at.get(topic)
        if found_at is None:
            return False
        if self._clock() - found_at < self.memory_s:
            return True
        del self._found_at[topic]
        return False

    def add(self, topic: str) -> None:
        """Remember `topic` as missing from now; forget the expired and the oldest past
        `kept`."""
        now = self._clock()
        self._found_at.pop(topic, None)  # found again: it moves to the end
        self._found_at[topic] = now
        self._forget_expired(now)
        while len(self._found_at) > self.kept:
            self._found_at.popitem(last=False)

    def _forget_expired(self, now: float) -> None:
        while self._found_at:
            oldest, found_at = next(iter(self._found_at.items()))
            if now - found_at < self.memory_s:
                return
            del self._found_at[oldest]


class Publisher:
    """Produces many records as a few record batches, then awaits every ack.

    Records of one call bound for one topic go out as one record batch to the partition
    handed the fewest so far, or with `split_parts_of` a large call in parts of at least
    that many records over several (`RecordSpread`). Building a batch costs a few
    microseconds a record where aiokafka's per-record `send` costs fifteen, and a worker
    that reads the partition gets the records together. Records keep their keys. What
    fails is retried alone, with backoff; what outlives every attempt is returned as its
    error.

    Calls take turns per partition. aiokafka holds one unsent batch a partition, and every
    `send_batch` to it waits for that batch to go, then looks again. With hundreds of calls
    waiting (a load generator or a client with a request per call, on a slow broker),
    each departure woke all of them to find one place: the live scale-step's load
    generator spent its loop on that and sent late (docs/benchmarks.md, stop 18). In turn,
    each departure wakes one.
    """

    def __init__(
        self,
        producer: AIOKafkaProducer,
        *,
        patience_s: float = 60.0,
        split_parts_of: int | None = None,
        metadata_timeout_s: float = 1.0,
        missing_topic_memory_s: float = 30.0,
        append_timeout_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.producer = producer
        self.patience_s = patience_s
        self.metadata_timeout_s = metadata_timeout_s
        """How long a topic the producer has no metadata for is asked after (enough for a
        Kafka that creates topics on first use)."""
        self._missing = MissingTopics(missing_topic_memory_s, clock, kept=MISSING_TOPICS_KEPT)
        """Topics found missing (not made by inferbus): one fails at once for
        `missing_topic_memory_s` instead of being asked again."""
        self.append_timeout_s = (
            kafka_settings().request_timeout_ms / 1000
            if append_timeout_s is None
            else append_timeout_s
        )
        """A batch that cannot be handed to the producer within this (turn included) fails
        as a timeout, as aiokafka's own wait would: callers in line do not wait one
        timeout each."""
        self._clock = clock
        self.split_parts_of = split_parts_of
        """Split a call's records for a topic in parts of at least this many (None: never)."""
        self._spreads: dict[str, RecordSpread] = {}
        self._turns: dict[tuple[str, int], asyncio.Lock] = {}
        """One lock a partition: whose batch goes to it next."""

    async def _partitions(self, topics: list[str]) -> dict[str, int | BaseException]:
        """Partition count per topic, or why it cannot be produced to. Topics are asked
        for together, with one listing of the broker's topics per call (aiokafka would
        otherwise wait its whole request timeout for every record)."""
        answers: dict[str, int | BaseException] = {}
        for topic in topics:
            if self._missing.recent(topic):
                answers[topic] = MissingTopic(
                    f"topic {topic!r} does not exist (looked up recently)"
                )
        asked = [topic for topic in topics if topic not in answers]
        if asked:
            listed = await self._broker_lists(asked)
            found = await asyncio.gather(*(self._look_up(topic, listed) for topic in asked))
            answers.update(zip(asked, found, strict=True))
        return answers

    async def _look_up(self, topic: str, listed: set[str] | BaseException) -> int | BaseException:
        if isinstance(listed, BaseException):
            return UnknownTopic(
                f"topic {topic!r} cannot be looked up: the broker does not answer "
                f"({error_text(listed)})"
            )
        if topic not in listed:
            if is_made_by_inferbus(topic):  # made again after a restart: retried
                return UnknownTopic(f"topic {topic!r} is not known to the broker (yet)")
            self._missing.add(topic)
            return MissingTopic(
                f"topic {topic!r} does not exist: create it before naming it in reply_to"
            )
        try:
            known = await within(self.producer.partitions_for(topic), self.metadata_timeout_s)
            return len(known)
        except (KafkaError, TimeoutError) as exc:
            self._forget(topic)
            return UnknownTopic(f"topic {topic!r} is not known to the broker: {exc!r}")

    async def _broker_lists(self, topics: list[str]) -> set[str] | BaseException:
        """Which of `topics` the broker lists (or why it does not answer), asked apart from
        the producer's own metadata; one not listed is asked about again for up to
        `metadata_timeout_s` (a topic created a moment ago may not be known to every
        broker of a cluster yet).

        A topic named to aiokafka's `partitions_for` joins the topics its client asks the
        broker about; a missing one there set off a storm of metadata requests (thousands
        in a second) and, in 2 of 8 tries against `inferbus up`, held the results produced
        with it for the client's 30 s request timeout (NotLeaderForPartition). So the
        producer is only asked about topics the broker has listed."""
        wanted = set(topics)
        give_up_at = self._clock() + self.metadata_timeout_s
        while True:
            try:
                cluster = await within(
                    self.producer.client.fetch_all_metadata(), self.metadata_timeout_s
                )
            except (KafkaError, TimeoutError) as exc:
                failure: BaseException = exc
                if isinstance(exc, TimeoutError):  # asyncio's says nothing
                    failure = KafkaTimeoutError(f"no answer within {self.metadata_timeout_s:g} s")
                return failure
            listed = wanted & set(cluster.topics())
            if listed == wanted or self._clock() >= give_up_at:
                return listed
            await asyncio.sleep(LIST_AGAIN_S)

    def _forget(self, topic: str) -> None:
        """aiokafka's `partitions_for` adds the topic to the client's metadata topics for
        good (asked for at every refresh): a reply topic a producer named that does not
        exist must not stay there (one per distinct name, for the life of the process)."""
        topics = getattr(self.producer.client, "_topics", None)
        if isinstance(topics, set):
            topics.discard(topic)

    async def _append(self, batch: Any, topic: str, partition: int) -> asyncio.Future[Any]:
        """Hand `batch` to the producer in this partition's turn, within `append_timeout_s`."""
        turn = self._turns.get((topic, partition))
        if turn is None:
            turn = self._turns[(topic, partition)] = asyncio.Lock()
        try:
            async with asyncio.timeout(self.append_timeout_s):
                async with turn:
                    future: asyncio.Future[Any] = await self.producer.send_batch(
                        batch, topic, partition=partition
                    )
                    return future
        except TimeoutError:
            raise KafkaTimeoutError(
                f"no room for a batch to {topic}[{partition}] within {self.append_timeout_s:g} s"
            ) from None
        except AssertionError as exc:
            # aiokafka's send_batch asserts the partition is among the topic's partitions in
            # its metadata, which may have refreshed while this batch waited its turn.
            raise StalePartition(
                f"partition {partition} of {topic!r} is not in the producer's metadata "
                f"any more (the topic came back with fewer): {error_text(exc)}"
            ) from exc

    async def send_all(self, records: Sequence[Outgoing]) -> list[RecordMetadata | BaseException]:
        """Per record, in order: its ack, or the error that ended its tries.

        Errors the broker may recover from (it is away, restarting, re-creating a topic)
        are retried with backoff for `patience_s`; the others (a record too large, no
        authorization) end at once. Acks are awaited within `patience_s` too (at least
        `LAST_TRY_ACK_S` a try): a broker that takes records and never answers (frozen, or
        cut off by the network) held a call 8 s patient for 85 s, aiokafka's request
        timeout twice. 0: one try, acks awaited as long as aiokafka waits.
        """
        outcomes: list[RecordMetadata | BaseException] = [KafkaError("not sent") for _ in records]
        pending = list(range(len(records)))
        give_up_at = self._clock() + self.patience_s
        attempt = 0
        while pending:
            attempt += 1
            # A try that starts as the patience ends still gets LAST_TRY_ACK_S for its acks.
            acks_by = max(give_up_at, self._clock() + LAST_TRY_ACK_S)
            failed = await self._send_once(
                records, pending, outcomes, acks_by=acks_by if self.patience_s > 0 else None
            )
            pending = [i for i in failed if retriable(outcomes[i])]
            if not pending or self._clock() >= give_up_at:
                break
            delay = min(0.1 * 2**attempt, 2.0)
            if attempt == 1 or attempt % 10 == 0:
                log.warning(
                    "event=publish_retry attempt=%d failed=%d delay_s=%.1f error=%r",
                    attempt,
                    len(pending),
                    delay,
                    outcomes[pending[0]],
                )
            await asyncio.sleep(delay)
        if attempt > 1:
            failed_now = sum(isinstance(o, BaseException) for o in outcomes)
            log.warning(
                "event=publish_settled attempts=%d records=%d failed=%d waited_s=%.1f",
                attempt,
                len(records),
                failed_now,
                self.patience_s - max(give_up_at - self._clock(), 0.0),
            )
        return outcomes

    async def _send_once(
        self,
        records: Sequence[Outgoing],
        indices: list[int],
        outcomes: list[RecordMetadata | BaseException],
        *,
        acks_by: float | None = None,
    ) -> list[int]:
        """One try of every record in `indices`; returns those that failed. An ack not in by
        `acks_by` (the clock's time; None: no bound) fails its records as a timeout.

        Topics the producer knows go out first: records for a topic that has to be looked
        up (a reply topic named for the first time, or one that does not exist) do not
        hold back the others in the call.
        """
        by_topic: dict[str, list[int]] = {}
        for index in indices:
            by_topic.setdefault(records[index].topic, []).append(index)
        cluster = self.producer.client.cluster
        sent: list[tuple[asyncio.Future[Any], str, int, list[int]]] = []
        failed: list[int] = []
        unknown: list[str] = []
        for topic, members in by_topic.items():
            known = cluster.partitions_for_topic(topic)
            if known:
                await self._send_topic(
                    topic, len(known), records, members, outcomes=outcomes, sent=sent
                )
            else:
                unknown.append(topic)
        if unknown:
            for topic, count in (await self._partitions(unknown)).items():
                members = by_topic[topic]
                if isinstance(count, BaseException):
                    failed.extend(members)
                    for index in members:
                        outcomes[index] = count
                    continue
                await self._send_topic(topic, count, records, members, outcomes=outcomes, sent=sent)
        results = await self._acks([s[0] for s in sent], acks_by)
        for (_, topic, partition, taken), result in zip(sent, results, strict=True):
            if isinstance(result, BaseException):
                failed.extend(taken)
                for index in taken:
                    outcomes[index] = result
                spread = self._spreads.get(topic)
                if spread is not None:
                    spread.give_back(partition, len(taken))
                continue
            for position, index in enumerate(taken):
                outcomes[index] = RecordMetadata(
                    topic,
                    partition,
                    TopicPartition(topic, partition),
                    result.offset + position,
                    result.timestamp,
                    result.timestamp_type,
                    result.log_start_offset,
                )
        return sorted(failed)

    async def _acks(
        self, futures: list[asyncio.Future[Any]], acks_by: float | None
    ) -> list[Any | BaseException]:
        """Each future's ack or error; one still waiting at `acks_by` is a KafkaTimeoutError.

        The wait is shielded: the futures are the producer's, and it may still deliver a
        batch given up on here (a repeat, dropped by id downstream).
        """
        gathered = asyncio.gather(*futures, return_exceptions=True)
        if acks_by is None:
            return await gathered
        try:
            async with asyncio.timeout(max(acks_by - self._clock(), 0.0)):
                return await asyncio.shield(gathered)
        except TimeoutError:
            late = KafkaTimeoutError(f"no ack within the publisher's {self.patience_s:g} s")
            return [_outcome(f) if f.done() else late for f in futures]

    async def _send_topic(
        self,
        topic: str,
        partitions: int,
        records: Sequence[Outgoing],
        members: list[int],
        *,
        outcomes: list[RecordMetadata | BaseException],
        sent: list[tuple[asyncio.Future[Any], str, int, list[int]]],
    ) -> None:
        """Hand one topic's records to the producer; their futures go into `sent`."""
        for partition, batch, taken in self._batches(topic, partitions, records, members, outcomes):
            try:
                future = await self._append(batch, topic, partition)
            except KafkaError as exc:
                future = _failed(exc)
            sent.append((future, topic, partition, taken))

    def _batches(
        self,
        topic: str,
        partitions: int,
        records: Sequence[Outgoing],
        members: list[int],
        outcomes: list[RecordMetadata | BaseException],
    ) -> list[tuple[int, Any, list[int]]]:
        """Record batches for one topic, in the parts `RecordSpread` plans (a part that
        outgrows one batch goes as several to its partition); a record too large for any
        batch gets its error in `outcomes` instead."""
        out: list[tuple[int, Any, list[int]]] = []
        pending = iter(members)
        spread = self._spread(topic, partitions)
        for partition, count in spread.plan(len(members)):
            batch, taken = self.producer.create_batch(), list[int]()
            for _ in range(count):
                index = next(pending)
                record = records[index]
                if _append(batch, record):
                    taken.append(index)
                    continue
                if taken:
                    out.append((partition, batch, taken))
                    batch, taken = self.producer.create_batch(), list[int]()
                    if _append(batch, record):
                        taken.append(index)
                        continue
                outcomes[index] = MessageSizeTooLargeError(
                    f"a record of {len(record.value)} bytes does not fit a record batch "
                    "(INFERBUS_KAFKA_MAX_BATCH_BYTES)"
                )
                spread.give_back(partition, 1)
            if taken:
                out.append((partition, batch, taken))
        return out

    def _spread(self, topic: str, partitions: int) -> RecordSpread:
        spread = self._spreads.pop(topic, None)
        if spread is None or spread.partitions != partitions:
            spread = RecordSpread(partitions, min_part=self.split_parts_of)
            if len(self._spreads) >= SPREADS_KEPT:  # the least recently used one starts over
                del self._spreads[next(iter(self._spreads))]
        self._spreads[topic] = spread  # most recently used last
        return spread


def _append(batch: Any, record: Outgoing) -> bool:
    appended = batch.append(
        key=record.key, value=record.value, timestamp=None, headers=record.headers
    )
    return appended is not None


def _outcome(future: asyncio.Future[Any]) -> Any | BaseException:
    """A done future's result, or its error (or CancelledError) as a value."""
    if future.cancelled():
        return asyncio.CancelledError()
    return future.exception() or future.result()


def _failed(exc: BaseException) -> asyncio.Future[Any]:
    future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    future.set_exception(exc)
    return future

"""A producer with aiokafka's batch interface, for publisher tests: no broker."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from aiokafka.errors import KafkaConnectionError, KafkaTimeoutError
from aiokafka.structs import RecordMetadata

from services.runtime.publisher import Outgoing


class FakeBatch:
    def __init__(self, room: int) -> None:
        self.room = room
        self.values: list[bytes] = []
        self.records: list[Outgoing] = []
        """What was appended, the topic left blank."""

    def append(self, *, key: bytes | None, value: bytes, timestamp: None, headers: Any) -> object:
        if len(self.values) >= self.room:
            return None
        self.values.append(value)
        self.records.append(Outgoing("", key, value, list(headers)))
        return object()


@dataclass(frozen=True)
class Listing:
    """What aiokafka's `fetch_all_metadata` returns, as far as the publisher reads it."""

    listed: frozenset[str]

    def topics(self) -> frozenset[str]:
        return self.listed


class FakeProducer:
    """Fails the first `fail` batches; knows only `topics`; batches hold `room` records."""

    def __init__(
        self,
        fail: int = 0,
        topics: tuple[str, ...] = ("known",),
        room: int = 100,
        *,
        lookup_s: float = 0.0,
        broker_answers: bool = True,
        listed: tuple[str, ...] = (),
    ) -> None:
        self.fail = fail
        self.lookup_s = lookup_s
        self.broker_answers = broker_answers
        self.listed = set(topics) | set(listed)
        """What the broker lists (`fetch_all_metadata`), the producer's metadata or not."""
        self.listings = 0
        self.lookups: list[str] = []
        """Topics asked of the producer's own metadata (`partitions_for`)."""
        self.room = room
        self.sent: list[tuple[int, list[str]]] = []
        self.topics = topics
        self.client = self
        self.offset = 0
        self._topics: set[str] = set(topics)

    @property
    def cluster(self) -> FakeProducer:
        return self

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        return {0, 1, 2} if topic in self.topics else None

    async def partitions_for(self, topic: str) -> set[int]:
        self._topics.add(topic)  # as aiokafka's client does before it asks
        self.lookups.append(topic)
        if topic in self.listed:
            return {0, 1, 2}
        raise KafkaTimeoutError(f"no metadata for {topic}")

    async def fetch_all_metadata(self) -> Listing:
        self.listings += 1
        await asyncio.sleep(self.lookup_s)
        if not self.broker_answers:
            raise KafkaConnectionError("broker away")
        return Listing(frozenset(self.listed))

    def create_batch(self) -> FakeBatch:
        return FakeBatch(self.room)

    async def send_batch(
        self, batch: FakeBatch, topic: str, *, partition: int
    ) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if self.fail > 0:
            self.fail -= 1
            future.set_exception(KafkaTimeoutError("broker away"))
        else:
            self.sent.append((partition, [v.decode() for v in batch.values]))
            future.set_result(RecordMetadata(topic, partition, None, self.offset, -1, 0, -1))
            self.offset += len(batch.values)
        return future

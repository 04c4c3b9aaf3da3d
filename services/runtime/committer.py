"""Offsets committed under a consumer group's id, for partitions assigned by inferbus itself.

A committer is an aiokafka consumer with the group's id that never fetches (all of its
partitions stay paused) and never joins the group: Kafka's own tools, lag exporters and
KEDA read the group's committed offsets as for any other group.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from aiokafka import AIOKafkaConsumer, TopicPartition

from infra.kafka import committed_offsets, make_consumer, start_with_retry


class Committer:
    """Commits and reads one group's offsets of one topic."""

    def __init__(self, bootstrap: str, *, group: str, topic: str, client_id: str) -> None:
        self.group = group
        self.topic = topic
        self._consumer: AIOKafkaConsumer = make_consumer(
            bootstrap=bootstrap, group_id=group, client_id=client_id
        )
        self._started = False

    async def start(self, partitions: int) -> None:
        """Connect and hold every partition of the topic, paused (idempotent)."""
        if self._started:
            return
        await start_with_retry(self._consumer.start, what=f"committer-{self.group}")
        self._started = True
        tps = [TopicPartition(self.topic, p) for p in range(partitions)]
        self._consumer.assign(tps)
        self._consumer.pause(*tps)

    async def committed(self, partitions: Iterable[int]) -> dict[int, int | None]:
        """The group's committed offset per partition (None: nothing committed yet)."""
        tps = [TopicPartition(self.topic, p) for p in partitions]
        found = await committed_offsets(self._consumer, tps)
        return {tp.partition: offset for tp, offset in found.items()}

    async def commit(self, offsets: Mapping[int, int]) -> None:
        """Commit `partition -> next offset to read`; raises the broker's error."""
        if offsets:
            await self._consumer.commit(
                {TopicPartition(self.topic, p): offset for p, offset in offsets.items()}
            )

    async def stop(self) -> None:
        """Disconnect (idempotent)."""
        if self._started:
            self._started = False
            await self._consumer.stop()

"""One worker's consumer of one model's interactive tier, alone in its group: what the
consumer-level integration tests take partitions with."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from aiokafka import AIOKafkaProducer

from schemas.topics import request_topic, worker_group
from services.runtime.consumer import ConsumerOptions, OwnedConsumer
from services.runtime.membership import Identity, Membership
from services.runtime.offsets import OffsetTracker


@dataclass
class LoneWorker:
    topic: str
    group: str
    membership: Membership
    offsets: OffsetTracker
    consumer: OwnedConsumer


def lone_worker(
    bootstrap: str,
    producer: AIOKafkaProducer,
    model: str,
    *,
    client_id: str,
    lease_s: float = 30.0,
    options: ConsumerOptions | None = None,
) -> LoneWorker:
    """A `ready` member (registry records sent with `producer`) and its consumer, not
    started; its drain returns at once."""
    topic, group = request_topic(model, "interactive"), worker_group(model, "interactive")

    async def send(topic_: str, key: bytes, value: bytes) -> None:
        await producer.send_and_wait(topic_, value, key=key)

    async def drain(topic_: str, partitions: frozenset[int]) -> None:
        return None

    identity = Identity("me", "inferbus-worker", model, ["interactive"], [group], datetime.now(UTC))
    membership = Membership(send, identity, lease_s=lease_s)
    membership.state = "ready"
    offsets = OffsetTracker()
    consumer = OwnedConsumer(
        bootstrap,
        client_id=client_id,
        membership=membership,
        groups=[(group, topic)],
        offsets=offsets,
        drain=drain,
        options=options or ConsumerOptions(),
    )
    return LoneWorker(topic, group, membership, offsets, consumer)

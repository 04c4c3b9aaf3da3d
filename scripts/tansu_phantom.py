"""Shows how Tansu 0.6 (memory storage) treats records produced across a restart.

    .venv/bin/python scripts/tansu_phantom.py

1. A topic with 12 partitions takes 5 records on partition 10.
2. The broker restarts on the same port and keeps nothing; the producer still has the
   topic in its metadata.
3. The producer sends batches to the topic that no longer exists: Tansu acks some of them
   (offsets 0, 10, ...) although `list_topics` is empty.
4. The topic is created again and more records are produced: the first fails with
   UnknownError, the rest get offsets from 1 up, overlapping the acked ones.
5. A consumer from the beginning reads the acked records first, then only some of the
   later ones; one from a later offset reads only later ones.

Apache Kafka refuses step 3 (UNKNOWN_TOPIC_OR_PARTITION) and numbers step 4 from 0 on an
empty log, so nothing there is lost. Inferbus works around it on Tansu: the topic keeper
re-creates topics within 0.2 s of the broker's return, consumers read on from the last end
they saw when a log's end moves behind their position, and the Python client sends again
what waits over 5 s after a restart (docs/reliability.md).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

import infra.kafka  # noqa: F401 - its patch: metadata requests never auto-create topics
from infra.broker import EmbeddedBroker
from infra.tasks import within

TOPIC, PARTITION = "phantom", 10


async def send(producer: AIOKafkaProducer, values: list[bytes]) -> Any:
    batch = producer.create_batch()
    for value in values:
        batch.append(key=None, value=value, timestamp=None)
    batch.close()
    return await (await producer.send_batch(batch, TOPIC, partition=PARTITION))


async def read(consumer: AIOKafkaConsumer, tp: TopicPartition) -> list[tuple[int, bytes]]:
    out: list[tuple[int, bytes]] = []
    for _ in range(3):
        for records in (await consumer.getmany(timeout_ms=500)).values():
            out += [(r.offset, r.value or b"") for r in records]
    return out


async def main() -> None:
    logging.basicConfig(level=logging.CRITICAL)
    broker = EmbeddedBroker(port=0)
    bootstrap = broker.start()
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    await admin.create_topics([NewTopic(TOPIC, 12, 1)])
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    for i in range(5):
        await producer.send_and_wait(TOPIC, b"before-%d" % i, partition=PARTITION)

    broker.stop()
    broker.start()
    print("restarted; the producer still knows the topic")
    for n in range(3):
        values = [b"lost-topic-%d-%d" % (n, j) for j in range(10)]
        try:
            meta = await within(send(producer, values), 3)
            print(f"  batch {n}: acked at offset {meta.offset}")
        except Exception as exc:
            print(f"  batch {n}: {type(exc).__name__}")
    fresh = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await fresh.start()
    print("topics the broker lists:", await fresh.list_topics())
    await fresh.create_topics([NewTopic(TOPIC, 12, 1)])
    print("created again")
    for i in range(5):
        for _ in range(10):
            try:
                meta = await producer.send_and_wait(TOPIC, b"after-%d" % i, partition=PARTITION)
                print(f"  after-{i}: offset {meta.offset}")
                break
            except Exception as exc:
                print(f"  after-{i}: {type(exc).__name__}, retried")
                await asyncio.sleep(0.3)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    tp = TopicPartition(TOPIC, PARTITION)
    consumer.assign([tp])
    await consumer.seek_to_beginning(tp)
    print("from the beginning:", [(o, v.decode()) for o, v in await read(consumer, tp)])
    end = (await consumer.end_offsets([tp]))[tp]
    consumer.seek(tp, max(end - 3, 0))
    later = [(o, v.decode()) for o, v in await read(consumer, tp)]
    print(f"from {max(end - 3, 0)} (end {end}):", later)
    await consumer.stop()
    await producer.stop()
    await admin.close()
    await fresh.close()
    broker.stop()


if __name__ == "__main__":
    asyncio.run(main())

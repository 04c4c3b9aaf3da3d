"""`committed_offsets` reads a group's committed offsets of many partitions in one request,
and agrees with aiokafka's one-partition `committed()` on the real broker."""

from __future__ import annotations

import uuid

import pytest
from aiokafka import TopicPartition

from infra.kafka import committed_offsets, make_consumer
from infra.topics import TopicSpec, ensure_topics
from services.runtime.committer import Committer

pytestmark = pytest.mark.integration


async def test_committed_offsets_in_one_request(broker: str) -> None:
    topic, group = f"co-{uuid.uuid4().hex[:8]}", f"co-group-{uuid.uuid4().hex[:8]}"
    await ensure_topics(broker, [TopicSpec(topic, 3)])
    committer = Committer(broker, group=group, topic=topic, client_id="co-test")
    await committer.start(3)
    reader = make_consumer(bootstrap=broker, group_id=group, client_id="co-test-reader")
    await reader.start()
    try:
        await committer.commit({0: 7, 2: 3})
        tps = [TopicPartition(topic, p) for p in range(3)]
        together = await committed_offsets(reader, tps)
        one_by_one = {tp: await reader.committed(tp) for tp in tps}
        assert together == one_by_one == {tps[0]: 7, tps[1]: None, tps[2]: 3}
        assert await committer.committed([0, 1, 2]) == {0: 7, 1: None, 2: 3}
    finally:
        await reader.stop()
        await committer.stop()

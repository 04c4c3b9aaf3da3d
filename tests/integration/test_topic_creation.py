"""Creating topics against a real broker: one that exists already is not counted as made."""

from __future__ import annotations

import uuid

import pytest
from aiokafka.admin import NewTopic

from infra.kafka import make_admin
from infra.topics import TopicSpec, created_topics, ensure_topics

pytestmark = pytest.mark.integration


async def test_a_topic_made_meanwhile_by_someone_else_is_not_counted(broker: str) -> None:
    """Regression: aiokafka answers a CreateTopics for an existing topic without raising,
    and the answer's TOPIC_ALREADY_EXISTS passed for a topic made (two ingest instances'
    keepers racing after a broker restart both announced it re-created)."""
    topic = f"inferbus.test.create-{uuid.uuid4().hex[:8]}"
    admin = make_admin(broker, client_id="create-test")
    await admin.start()
    try:
        first = created_topics(await admin.create_topics([NewTopic(topic, 1, 1)]))
        again = created_topics(await admin.create_topics([NewTopic(topic, 1, 1)]))
    finally:
        await admin.close()

    assert (first, again) == ([topic], [])
    assert await ensure_topics(broker, [TopicSpec(topic, 1)]) == []

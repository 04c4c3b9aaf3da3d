"""What a CreateTopics answer means, what the topic keeper does when it is refused, and the
replication and message size topics are made with."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from aiokafka.errors import (
    InvalidPartitionsError,
    KafkaError,
    TopicAuthorizationFailedError,
)

import infra.topics
from infra.settings import KafkaSettings, kafka_settings
from infra.topics import TopicKeeper, TopicSpec, created_topics, ensure_topics, new_topic

COMPACT = {"cleanup.policy": "compact"}


@dataclass(frozen=True)
class Answer:
    """A CreateTopics answer as aiokafka returns it (v1+: topic, code, message)."""

    topic_errors: list[tuple[Any, ...]]


@pytest.mark.parametrize(
    ("errors", "created", "raised"),
    [
        pytest.param([("a", 0, None), ("b", 0, None)], ["a", "b"], None, id="all-made"),
        pytest.param(
            [("a", 0, None), ("b", 36, "Topic with this name already exists.")],
            ["a"],
            None,
            id="one-made-by-someone-else",
        ),
        pytest.param([("a", 0)], ["a"], None, id="v0-answer-without-message"),
        pytest.param([("a", 29, None)], None, TopicAuthorizationFailedError, id="refused-by-acl"),
        pytest.param(
            [("a", 0, None), ("b", 37, "partitions must be positive")],
            None,
            InvalidPartitionsError,
            id="invalid",
        ),
    ],
)
def test_a_create_answer_counts_only_what_was_made(
    errors: list[tuple[Any, ...]], created: list[str] | None, raised: type[KafkaError] | None
) -> None:
    """Regression: aiokafka returns refusals in the answer without raising, and every
    topic asked for counted as made (the keeper announced refused ones as re-created)."""
    if raised is None:
        assert created_topics(Answer(errors)) == created
    else:
        with pytest.raises(raised, match="not created"):
            created_topics(Answer(errors))


class RefusingAdmin:
    """A broker that answers, lists no topics and refuses to create any."""

    def __init__(self) -> None:
        self.creates = 0

    async def list_topics(self) -> list[str]:
        return []

    async def create_topics(self, new: list[Any]) -> Answer:
        self.creates += 1
        return Answer([(topic.name, 29, None) for topic in new])

    async def close(self) -> None:
        pass


async def test_a_refused_keeper_says_so_once_and_asks_at_its_usual_pace(
    caplog: pytest.LogCaptureFixture,
) -> None:
    admin = RefusingAdmin()
    keeper = TopicKeeper("unused:9092", lambda: [TopicSpec("inferbus.x", 1)], every_s=0.02)
    keeper._admin = admin  # its one connection, here a fake
    announced: list[list[str]] = []

    async def announce(names: list[str]) -> None:
        announced.append(names)

    keeper.announce = announce
    with caplog.at_level(logging.WARNING, logger="infra.topics"):
        keeper.start()
        await asyncio.sleep(0.5)
        await keeper.stop()

    refusals = [r for r in caplog.records if "topic_keeper_refused" in r.getMessage()]
    assert len(refusals) == 1 and refusals[0].levelno == logging.ERROR
    assert "INFERBUS_INGEST_KEEP_TOPICS" in refusals[0].getMessage()
    # every_s (0.02 s) apart: ~25 in 0.5 s; as for a broker away (0.2 s) at most 3
    assert 6 <= admin.creates <= 26, "at the usual pace, neither away nor a busy loop"
    assert announced == [] and keeper.recreated == 0


class RecordingAdmin:
    """A broker that has no topics and makes every one asked for, keeping the requests."""

    def __init__(self) -> None:
        self.asked: list[Any] = []

    async def start(self) -> None:
        pass

    async def list_topics(self) -> list[str]:
        return []

    async def create_topics(self, new: list[Any]) -> Answer:
        self.asked.extend(new)
        return Answer([(topic.name, 0, None) for topic in new])

    async def close(self) -> None:
        pass


@pytest.fixture
def kafka_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """The process's Kafka settings re-read from an environment the test sets."""
    kafka_settings.cache_clear()
    yield monkeypatch
    kafka_settings.cache_clear()


@pytest.mark.parametrize(
    ("env", "replicas", "max_message_bytes"),
    [
        pytest.param({}, 1, "8388608", id="defaults-single-node"),
        pytest.param(
            {
                "INFERBUS_KAFKA_REPLICATION_FACTOR": "3",
                "INFERBUS_KAFKA_MAX_REQUEST_BYTES": "9000000",
            },
            3,
            "9000000",
            id="cluster",
        ),
    ],
)
async def test_created_topics_take_the_replication_factor_and_message_size_of_the_settings(
    kafka_env: pytest.MonkeyPatch, env: dict[str, str], replicas: int, max_message_bytes: str
) -> None:
    """Regression: every topic was made with one replica whatever the cluster, and with the
    broker's ~1 MiB message limit under inferbus's 4 MiB batches."""
    for name, value in env.items():
        kafka_env.setenv(name, value)
    admin = RecordingAdmin()
    kafka_env.setattr(infra.topics, "make_admin", lambda *_a, **_k: admin)
    specs = [TopicSpec("inferbus.req.m.batch", 12), TopicSpec("inferbus.instances", 1, COMPACT)]

    assert await ensure_topics("unused:9092", specs) == [s.name for s in specs]

    assert [(t.name, t.num_partitions, t.replication_factor) for t in admin.asked] == [
        ("inferbus.req.m.batch", 12, replicas),
        ("inferbus.instances", 1, replicas),
    ]
    assert [t.topic_configs for t in admin.asked] == [
        {"max.message.bytes": max_message_bytes},
        {"max.message.bytes": max_message_bytes, **COMPACT},
    ]


async def test_the_keeper_recreates_topics_with_the_same_replication(
    kafka_env: pytest.MonkeyPatch,
) -> None:
    kafka_env.setenv("INFERBUS_KAFKA_REPLICATION_FACTOR", "3")
    admin = RecordingAdmin()
    keeper = TopicKeeper("unused:9092", lambda: [TopicSpec("inferbus.dlq", 1)])
    keeper._admin = admin

    assert await keeper.round() == ["inferbus.dlq"]
    assert [t.replication_factor for t in admin.asked] == [3]


def test_a_spec_config_wins_over_the_default_message_size() -> None:
    spec = TopicSpec("inferbus.x", 1, {"max.message.bytes": "100"})
    topic = new_topic(spec, KafkaSettings(replication_factor=2))
    assert (topic.replication_factor, topic.topic_configs) == (2, {"max.message.bytes": "100"})

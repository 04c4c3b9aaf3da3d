"""What a CreateTopics answer means, and what the topic keeper does when it is refused."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

import pytest
from aiokafka.errors import (
    InvalidPartitionsError,
    KafkaError,
    TopicAuthorizationFailedError,
)

from infra.topics import TopicKeeper, TopicSpec, created_topics


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

"""A poll's room is shared evenly among the partitions with records buffered."""

from __future__ import annotations

from typing import Any, cast

import pytest
from aiokafka import TopicPartition

from services.runtime.consumer import fair_shares
from tests.integration.lone_worker import lone_worker

A, B, C = (TopicPartition("t", p) for p in range(3))


@pytest.mark.parametrize(
    ("buffered", "limit", "turn", "expected"),
    [
        ([], 8, 0, []),
        ([A, B, C], 0, 0, []),
        ([A], 8, 5, [(A, 8)]),
        ([A, B, C], 6, 0, [(A, 2), (B, 2), (C, 2)]),
        ([A, B, C], 7, 0, [(A, 3), (B, 2), (C, 2)]),
        ([A, B, C], 7, 1, [(B, 3), (C, 2), (A, 2)]),
        ([A, B, C], 2, 0, [(A, 1), (B, 1)]),
        ([A, B, C], 2, 1, [(B, 1), (C, 1)]),
        ([A, B, C], 2, 2, [(C, 1), (A, 1)]),
        ([A, B, C], 1, 4, [(B, 1)]),
    ],
)
def test_shares(
    buffered: list[TopicPartition],
    limit: int,
    turn: int,
    expected: list[tuple[TopicPartition, int]],
) -> None:
    assert fair_shares(buffered, limit, turn) == expected


@pytest.mark.parametrize("limit", [1, 2, 5, 64])
@pytest.mark.parametrize("count", [1, 3, 12])
def test_every_partition_gets_its_turn_and_the_room_is_used(limit: int, count: int) -> None:
    buffered = [TopicPartition("t", p) for p in range(count)]
    taken = {tp: 0 for tp in buffered}
    for turn in range(count):
        shares = fair_shares(buffered, limit, turn)
        assert sum(share for _, share in shares) == limit
        for tp, share in shares:
            taken[tp] += share
    assert len(set(taken.values())) == 1, "over a round of turns each partition got as many"


def test_a_fetcher_without_the_buffer_is_said_once_and_polls_take_as_before(
    caplog: pytest.LogCaptureFixture,
) -> None:
    consumer = lone_worker("127.0.0.1:1", cast(Any, None), "m", client_id="unit").consumer
    consumer._consumer = object()  # an aiokafka whose fetcher keeps no `_records`
    with caplog.at_level("WARNING"):
        assert consumer._buffered_data() == []
        assert consumer._buffered_data() == []
    said = [r for r in caplog.records if "fair_polls_unavailable" in r.getMessage()]
    assert len(said) == 1

"""A poll's room is shared evenly among the partitions with records buffered."""

from __future__ import annotations

import pytest
from aiokafka import TopicPartition

from services.runtime.consumer import fair_shares

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

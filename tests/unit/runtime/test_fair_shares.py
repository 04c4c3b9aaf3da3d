"""A poll's room is shared evenly among the partitions with records buffered."""

from __future__ import annotations

from types import SimpleNamespace
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


class _Buffered:
    """An aiokafka consumer's buffer of fetched records, handed out as `getmany` does."""

    def __init__(self, buffered: dict[TopicPartition, int]) -> None:
        self.left = {tp: list(range(n)) for tp, n in buffered.items()}
        self._fetcher = SimpleNamespace(_records=self.left)

    async def getmany(
        self, *partitions: TopicPartition, timeout_ms: int, max_records: int
    ) -> dict[TopicPartition, list[int]]:
        out: dict[TopicPartition, list[int]] = {}
        for tp in partitions or list(self.left):
            taken, self.left[tp] = self.left[tp][:max_records], self.left[tp][max_records:]
            if taken:
                out[tp] = taken
            max_records -= len(taken)
        return out


@pytest.mark.parametrize(
    ("buffered", "limit", "taken"),
    [
        pytest.param({A: 10, B: 10, C: 10}, 9, {A: 3, B: 3, C: 3}, id="even-shares"),
        pytest.param({A: 10, B: 1, C: 10}, 9, {A: 5, B: 1, C: 3}, id="a-short-partitions-room"),
        pytest.param({A: 1, B: 1, C: 10}, 9, {A: 1, B: 1, C: 7}, id="two-short-ones"),
        pytest.param({A: 2, B: 1, C: 1}, 9, {A: 2, B: 1, C: 1}, id="less-than-the-room"),
    ],
)
async def test_a_poll_uses_the_room_a_short_partition_leaves(
    buffered: dict[TopicPartition, int], limit: int, taken: dict[TopicPartition, int]
) -> None:
    """Under a backlog an engine's batch is the poll's room: a partition with fewer records
    than its share must not leave the batch smaller."""
    consumer = lone_worker("127.0.0.1:1", cast(Any, None), "m", client_id="unit").consumer
    consumer._consumer = _Buffered(buffered)
    batches = await consumer._take(0, limit)
    assert {tp: len(records) for tp, records in batches.items()} == taken
    for records in batches.values():
        assert records == sorted(records), "a partition's records stay in offset order"

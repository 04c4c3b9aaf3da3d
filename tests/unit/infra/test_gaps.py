from __future__ import annotations

from dataclasses import dataclass

import pytest
from aiokafka import TopicPartition

from infra.gaps import GapGuard, admit_in_order, getmany_in_order

TP = TopicPartition("t", 0)


@dataclass(frozen=True)
class Rec:
    offset: int
    timestamp: int = -1
    """Epoch ms the record was written (-1: unknown, as in most tests)."""


def recs(*offsets: int) -> list[Rec]:
    return [Rec(o) for o in offsets]


def offsets(records: object) -> list[int]:
    return [r.offset for r in records]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("fetches", "expected"),
    [
        pytest.param(
            [(recs(0, 1, 2), 0.0), (recs(3, 4), 0.1)],
            [([0, 1, 2], None), ([3, 4], None)],
            id="in-order",
        ),
        pytest.param(
            # 3-4 becomes readable after 5-6 was returned: hold 5-6, read again from 3.
            [(recs(0, 1, 2), 0.0), (recs(5, 6), 0.1), (recs(3, 4, 5, 6), 0.15)],
            [([0, 1, 2], None), ([], 3), ([3, 4, 5, 6], None)],
            id="gap-between-fetches-fills",
        ),
        pytest.param(
            [(recs(0, 1, 4, 5), 0.0), (recs(2, 3, 4, 5), 0.05)],
            [([0, 1], 2), ([2, 3, 4, 5], None)],
            id="gap-inside-a-fetch-fills",
        ),
        pytest.param(
            # A gap that stands (a transaction marker on Kafka) is passed after the wait.
            [(recs(0, 1, 3), 0.0), (recs(3), 0.1), (recs(3), 0.31), (recs(4), 0.4)],
            [([0, 1], 2), ([], 2), ([3], None), ([4], None)],
            id="standing-gap-passed-after-the-wait",
        ),
        pytest.param(
            # Offsets start over lower (the broker lost its log): a new order, no gap.
            [(recs(10, 11), 0.0), (recs(0, 1), 0.1)],
            [([10, 11], None), ([0, 1], None)],
            id="moved-back",
        ),
        pytest.param(
            [(recs(7, 8), 0.0)],
            [([7, 8], None)],
            id="first-read-anywhere",
        ),
        pytest.param(
            [(recs(0, 1, 1, 2), 0.0)],
            [([0, 1, 2], None)],
            id="a-repeat-within-a-fetch-is-handed-on-once",
        ),
    ],
)
def test_admit(
    fetches: list[tuple[list[Rec], float]], expected: list[tuple[list[int], int | None]]
) -> None:
    guard = GapGuard(wait_s=0.3)
    got = []
    for records, now in fetches:
        admitted = guard.admit(TP, records, now)
        got.append((offsets(admitted.records), admitted.seek_to))
    assert got == expected


def test_counts_filled_and_passed_gaps() -> None:
    guard = GapGuard(wait_s=0.3)
    guard.admit(TP, recs(0, 2), 0.0)
    guard.admit(TP, recs(1, 2), 0.01)
    guard.admit(TP, recs(4), 0.02)
    guard.admit(TP, recs(4), 0.5)
    assert (guard.gaps_filled, guard.gaps_passed) == (1, 1)


NOW_S = 1_000.0


@pytest.mark.parametrize(
    ("written_s_ago", "admitted", "seek_to", "historic"),
    [
        pytest.param(100.0, [0, 5], None, 1, id="old: compacted away, passed at once"),
        pytest.param(10.0, [0, 5], None, 1, id="at the threshold: passed"),
        pytest.param(1.0, [0], 1, 0, id="fresh: a batch still arriving, waited for"),
    ],
)
def test_a_gap_behind_an_old_record_is_history(
    written_s_ago: float, admitted: list[int], seek_to: int | None, historic: int
) -> None:
    guard = GapGuard(wait_s=0.3, wall_clock=lambda: NOW_S)
    written_ms = int((NOW_S - written_s_ago) * 1000)
    got = guard.admit(TP, [Rec(0, written_ms), Rec(5, written_ms)], 0.0)
    assert (offsets(got.records), got.seek_to) == (admitted, seek_to)
    assert (guard.gaps_historic, guard.gaps_passed) == (historic, 0)


def test_a_compacted_topic_is_read_through_without_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    consumer, guard = Consumer(), GapGuard(wait_s=0.3, wall_clock=lambda: NOW_S)
    compacted = [Rec(o, 1_000) for o in (0, 3, 4, 9, 12)]  # written long ago
    out = admit_in_order(consumer, guard, {TP: compacted}, 0.0)
    assert offsets(out[TP]) == [0, 3, 4, 9, 12]
    assert consumer.sought == []
    assert not [r for r in caplog.records if "offset_gap" in r.getMessage()]


def test_forget_drops_the_expected_order() -> None:
    guard = GapGuard()
    guard.admit(TP, recs(0, 1), 0.0)
    guard.forget(TP)
    # Acquired again at a committed offset further on: no gap to wait for.
    assert offsets(guard.admit(TP, recs(9), 0.1).records) == [9]


class Consumer:
    def __init__(self) -> None:
        self.sought: list[tuple[TopicPartition, int]] = []

    def seek(self, partition: TopicPartition, offset: int) -> None:
        self.sought.append((partition, offset))


def test_admit_in_order_seeks_each_held_back_partition() -> None:
    other = TopicPartition("t", 1)
    consumer, guard = Consumer(), GapGuard()
    out = admit_in_order(consumer, guard, {TP: recs(0, 1), other: recs(0)}, 0.0)
    assert {tp: offsets(r) for tp, r in out.items()} == {TP: [0, 1], other: [0]}
    out = admit_in_order(consumer, guard, {TP: recs(3), other: recs(1)}, 0.1)
    assert {tp: offsets(r) for tp, r in out.items()} == {other: [1]}
    assert consumer.sought == [(TP, 2)]


def test_a_passed_gap_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    consumer, guard = Consumer(), GapGuard(wait_s=0.3)
    admit_in_order(consumer, guard, {TP: recs(0, 2)}, 0.0)
    assert not [r for r in caplog.records if "offset_gap_passed" in r.getMessage()]
    admit_in_order(consumer, guard, {TP: recs(2)}, 0.5)
    [line] = [r.getMessage() for r in caplog.records if "offset_gap_passed" in r.getMessage()]
    assert "topic=t partition=0" in line


class FetchingConsumer(Consumer):
    def __init__(self, fetches: list[dict[TopicPartition, list[Rec]]]) -> None:
        super().__init__()
        self.fetches = fetches

    async def getmany(self, *, timeout_ms: int) -> dict[TopicPartition, list[Rec]]:
        return self.fetches.pop(0)


async def test_getmany_in_order_reads_through_the_guard() -> None:
    consumer = FetchingConsumer([{TP: recs(0, 1)}, {TP: recs(3)}])
    guard = GapGuard()
    first = await getmany_in_order(consumer, guard, timeout_ms=10)
    second = await getmany_in_order(consumer, guard, timeout_ms=10)
    assert offsets(first[TP]) == [0, 1]
    assert second == {}
    assert consumer.sought == [(TP, 2)]

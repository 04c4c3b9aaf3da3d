"""A position past a log's reported end is past the log only if the last batch says so
(Tansu reports the last batch's first offset + 1)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any
from unittest.mock import AsyncMock

import pytest
from aiokafka import TopicPartition

from infra import log_end
from infra.log_end import LogEndProbe, past_log_end


@pytest.mark.parametrize(
    ("position", "reported_end", "highest_seen", "past"),
    [
        pytest.param(14, 10, 13, False, id="inside-a-last-batch-of-five"),
        pytest.param(55, 10, 9, True, id="an-earlier-logs-position"),
        pytest.param(55, 10, None, False, id="nothing-read-not-known"),
        pytest.param(3, 0, None, True, id="an-empty-log"),
        pytest.param(0, 0, None, False, id="an-empty-log-at-its-start"),
        pytest.param(10, 10, 9, False, id="at-the-end"),
        pytest.param(11, 10, 9, True, id="one-past-the-end"),
    ],
)
def test_past_log_end(
    position: int, reported_end: int, highest_seen: int | None, past: bool
) -> None:
    assert past_log_end(position, reported_end, highest_seen) is past


class _Fetches:
    """Stands in for `fetch_once`: the last batch's highest offset per partition, counted."""

    def __init__(self, highest: int) -> None:
        self.highest, self.calls = highest, 0

    async def __call__(self, consumer: object, starts: dict[Any, int], timeout_s: float) -> Any:
        self.calls += 1
        return {tp: [SimpleNamespace(offset=self.highest)] for tp in starts}


TP = TopicPartition("inferbus.ingest", 0)


async def test_a_position_inside_a_known_last_batch_is_not_read_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A client's acks move its position inside one last batch: each move read the batch
    again (a fetch every 2 s a partition under load)."""
    fetches = _Fetches(highest=14)
    monkeypatch.setattr(log_end, "fetch_once", fetches)
    probe = LogEndProbe("127.0.0.1:1", client_id="t")
    monkeypatch.setattr(probe, "_reader", AsyncMock())

    for position in (12, 13, 15):  # inside the batch that ends at offset 14
        assert (await probe.judge({TP: 10}, {TP: position})).past == []
    assert fetches.calls == 1
    assert (await probe.judge({TP: 10}, {TP: 16})).past == [TP], "past the batch: read again"
    assert (await probe.judge({TP: 11}, {TP: 13})).past == []
    assert fetches.calls == 3, "a new reported end is a new last batch"


async def test_log_spans_read_each_partitions_start_and_its_last_batchs_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One question for the starts, one for the reported ends, one fetch of the last
    batches: the end is past a last batch of five, and a log emptied by retention (start ==
    reported end) is not fetched."""
    full, emptied = TopicPartition("t", 0), TopicPartition("t", 1)
    consumer = SimpleNamespace(
        end_offsets=AsyncMock(return_value={full: 10, emptied: 7}),
        beginning_offsets=AsyncMock(return_value={full: 2, emptied: 7}),
    )
    fetched: list[dict[Any, int]] = []

    async def fetch_once(consumer: object, starts: dict[Any, int], timeout_s: float) -> Any:
        fetched.append(starts)
        return {tp: [SimpleNamespace(offset=13)] for tp in starts}

    monkeypatch.setattr(log_end, "fetch_once", fetch_once)
    assert await log_end.log_spans(consumer, [full, emptied]) == {full: (2, 14), emptied: (7, 7)}
    assert fetched == [{full: 9}]
    assert consumer.beginning_offsets.await_count == 1

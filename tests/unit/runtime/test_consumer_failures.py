"""What `OwnedConsumer` does when a step of a poll fails: records already taken go out,
and a consumer that could not be rebuilt is rebuilt by the next poll."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka import TopicPartition

from services.runtime.consumer import OwnedConsumer, _Group
from services.runtime.membership import Identity, Membership
from services.runtime.offsets import OffsetTracker

TP = TopicPartition("inferbus.ingest.batch", 0)


class _Fetcher:
    """Hands out ten records a call, 0 to 9, then 10 to 19: each call moves the position on."""

    def __init__(self) -> None:
        self.position = 0
        self.stopped = False

    async def getmany(self, *tps: TopicPartition, **_: Any) -> dict[Any, list[Any]]:
        if tps:  # the control partitions: none here
            return {}
        batch = [
            SimpleNamespace(topic=TP.topic, partition=0, offset=o, value=b"x", key=None)
            for o in range(self.position, self.position + 10)
        ]
        self.position += 10
        return {TP: batch}

    async def stop(self) -> None:
        self.stopped = True

    def assign(self, _: object) -> None:
        pass

    def pause(self, *_: object) -> None:
        pass

    def seek(self, *_: object) -> None:
        pass


async def _no_send(*_: object) -> None:
    pass


def _consumer(offsets: OffsetTracker) -> OwnedConsumer:
    membership = Membership(
        _no_send,
        Identity(
            instance_id="me",
            service="ingest",
            model="",
            tiers=[],
            groups=["g"],
            started_at=datetime.now(UTC),
        ),
    )
    membership.published_at = datetime.now(UTC)  # a fresh lease
    consumer = OwnedConsumer(
        "127.0.0.1:1",
        client_id="t",
        membership=membership,
        groups=[],
        offsets=offsets,
        drain=None,  # type: ignore[arg-type]
        control=False,
    )
    consumer._consumer = _Fetcher()
    consumer.pacer = SimpleNamespace(observe=lambda *_: None)  # type: ignore[assignment]
    consumer._groups = [_Group("g", TP.topic, 1, committer=None, owned={0})]  # type: ignore[arg-type]
    return consumer


@pytest.fixture
def offsets() -> OffsetTracker:
    return OffsetTracker()


@pytest.fixture
def consumer(offsets: OffsetTracker) -> Iterator[OwnedConsumer]:
    owned = _consumer(offsets)
    yield owned
    if owned._watching is not None:
        owned._watching.cancel()


async def _handle_polls(consumer: OwnedConsumer, offsets: OffsetTracker, polls: int) -> list[int]:
    """What ingest's and the worker's poll loops do with what each poll hands out. A poll
    that raised would fail the test: what goes wrong in its housekeeping is the consumer's
    to say and try again, and the records it took still go out."""
    handled = []
    for _ in range(polls):
        records = await consumer.poll(timeout_ms=0)
        for record in records:
            epoch = offsets.polled(record.topic, record.partition, record.offset)
            offsets.answered(record.topic, record.partition, record.offset, epoch)
            handled.append(record.offset)
    return handled


@pytest.mark.parametrize("error", [RuntimeError("a bug"), ConnectionError("broker away")])
async def test_a_poll_whose_housekeeping_fails_still_hands_out_its_records(
    consumer: OwnedConsumer, offsets: OffsetTracker, error: Exception
) -> None:
    """The records were taken (the position is past them) before the rebalance failed:
    dropped, they would never be answered and the next commit would pass them."""
    calls = 0

    async def rebalance() -> None:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise error

    consumer.rebalance = rebalance  # type: ignore[method-assign]
    consumer.options = SimpleNamespace(  # type: ignore[assignment]
        **{**consumer.options.__dict__, "rebalance_every_s": 0.0}
    )

    handled = await _handle_polls(consumer, offsets, polls=3)

    assert handled == list(range(30))
    assert offsets.committable() == {(TP.topic, 0): 30}
    assert calls == 3  # tried again at its next turn


async def test_a_failed_read_again_is_tried_again_by_the_next_poll(
    consumer: OwnedConsumer, offsets: OffsetTracker, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[object] = []

    async def read_again(topics: object) -> None:
        reads.append(topics)
        if len(reads) == 1:
            raise RuntimeError("a bug")

    monkeypatch.setattr(consumer, "_read_again", read_again)
    consumer.membership.logs_restarted(None)

    handled = await _handle_polls(consumer, offsets, polls=3)

    assert handled == list(range(30))
    assert len(reads) == 2  # failed, then done; the third poll has nothing to read again


async def test_a_rebuild_that_cannot_start_is_tried_again_by_the_next_poll(
    consumer: OwnedConsumer, offsets: OffsetTracker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A consumer left unstarted failed every later poll with an AttributeError that no
    rebuild followed, while the instance kept its partitions."""
    starts = 0
    fresh = _Fetcher()

    async def open_consumer() -> _Fetcher:
        nonlocal starts
        starts += 1
        if starts == 1:
            consumer._consumer = SimpleNamespace()  # what a consumer that never started is
            raise ConnectionError("broker still away")
        consumer._consumer = fresh
        return fresh

    acquired: list[frozenset[int]] = []

    async def acquire(group: _Group, parts: frozenset[int]) -> None:
        acquired.append(parts)
        group.owned |= parts

    monkeypatch.setattr(consumer, "_open_consumer", open_consumer)
    monkeypatch.setattr(consumer, "_acquire", acquire)
    with pytest.raises(ConnectionError):
        await consumer._rebuild()
    assert consumer._groups[0].owned == set()

    await consumer.tend()  # between polls: no unstarted consumer is read
    handled = await _handle_polls(consumer, offsets, polls=1)

    assert starts == 2
    assert acquired == [frozenset({0})]  # the partitions it held, taken back once
    assert handled == list(range(10))


class _Committer:
    def __init__(self) -> None:
        self.commits: list[dict[int, int]] = []

    async def commit(self, offsets: dict[int, int]) -> None:
        self.commits.append(dict(offsets))


async def test_a_consumer_back_from_a_pause_commits_nothing_before_it_fenced(
    consumer: OwnedConsumer, offsets: OffsetTracker
) -> None:
    """Regression: a worker frozen past its lease committed its old offset over the new
    owner's when it went on (34 over 100), and what lay between was answered again."""
    committer = _Committer()
    consumer._groups[0].committer = committer  # type: ignore[assignment]
    for offset in range(3):
        epoch = offsets.polled(TP.topic, 0, offset)
        offsets.answered(TP.topic, 0, offset, epoch)
    consumer.membership.lapses += 1  # a refresh ended a pause before this consumer looked
    await consumer._commit_now()
    assert committer.commits == []
    consumer._seen_lapses = consumer.membership.lapses  # fenced for it
    await consumer._commit_now()
    assert committer.commits == [{0: 3}]

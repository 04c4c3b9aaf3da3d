"""TopicFeed and the feeds built on it, over a fake consumer (no broker)."""

from __future__ import annotations

import asyncio
import itertools
import logging
from dataclasses import dataclass, field
from typing import Any

import pytest

from infra import feed as feed_module
from infra.feed import FEED_WAIT_MS, TopicFeed, feed_wait_ms
from infra.rollout.feed import RolloutFeed
from infra.rollout.state import RolloutBook
from scaler.collector.feeds import TelemetryFeed


@dataclass(frozen=True)
class FakeRecord:
    key: bytes | None
    value: bytes | None
    offset: int = field(default_factory=itertools.count().__next__)


class FakeConsumer:
    """Hands out `batches` one poll at a time, then waits out each poll's timeout."""

    def __init__(self, batches: list[list[FakeRecord]] | Exception) -> None:
        self.batches = batches
        self.stopped = False

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        self.stopped = True

    async def getmany(self, timeout_ms: int) -> dict[str, list[FakeRecord]]:
        if isinstance(self.batches, Exception):
            raise self.batches
        if self.batches:
            return {"tp": self.batches.pop(0)}
        await asyncio.sleep(timeout_ms / 1000)
        return {}


@dataclass
class Consumers:
    """Stands in for `make_consumer`: hands out `next` and keeps each call's options."""

    next: FakeConsumer = field(default_factory=lambda: FakeConsumer([]))
    options: list[dict[str, Any]] = field(default_factory=list)

    def __call__(self, *topics: str, **options: Any) -> FakeConsumer:
        self.options.append({"topics": topics, **options})
        return self.next


@pytest.fixture
def consumers(monkeypatch: pytest.MonkeyPatch) -> Consumers:
    made = Consumers()
    monkeypatch.setattr(feed_module, "make_consumer", made)
    return made


async def test_a_feed_folds_every_record_in_order_and_starts_and_closes_once(
    consumers: Consumers,
) -> None:
    consumers.next = FakeConsumer(
        [[FakeRecord(b"a", b"1"), FakeRecord(b"b", None)], [FakeRecord(b"a", b"2")]]
    )
    seen: list[tuple[bytes | None, bytes | None]] = []
    done = asyncio.Event()

    def fold(key: bytes | None, value: bytes | None) -> None:
        seen.append((key, value))
        if len(seen) == 3:
            done.set()

    feed = TopicFeed("b:9092", "t", fold, name="test", start_at="earliest")
    await feed.start()
    await feed.start()
    await asyncio.wait_for(done.wait(), 2)
    await feed.close()
    await feed.close()
    assert seen == [(b"a", b"1"), (b"b", None), (b"a", b"2")]
    assert len(consumers.options) == 1
    assert consumers.next.stopped
    assert feed.error is None


async def test_a_feed_whose_loop_dies_keeps_the_error_and_logs_it(
    consumers: Consumers, caplog: pytest.LogCaptureFixture
) -> None:
    consumers.next = FakeConsumer(RuntimeError("gone"))
    feed = TopicFeed("b:9092", "t", lambda key, value: None, name="test", start_at="latest")
    with caplog.at_level(logging.ERROR, logger="infra.feed"):
        await feed.start()
        for _ in range(10):
            await asyncio.sleep(0)
    await feed.close()
    assert isinstance(feed.error, RuntimeError)
    assert "event=test_feed_stopped topic=t" in caplog.text


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        pytest.param(
            lambda: RolloutFeed("b:9092", RolloutBook()),
            {
                "topics": ("inferbus.rollouts",),
                "client_id": "inferbus-rollouts",
                "auto_offset_reset": "earliest",
            },
            id="rollouts",
        ),
        pytest.param(
            lambda: TelemetryFeed("b:9092"),
            {
                "topics": ("inferbus.telemetry",),
                "client_id": "inferbus",
                "auto_offset_reset": "latest",
            },
            id="telemetry",
        ),
    ],
)
async def test_feeds_read_without_a_group_and_wait_long_between_fetches(
    consumers: Consumers, make: Any, expected: dict[str, Any]
) -> None:
    """Both topics are written rarely: an idle feed must not ask the broker every few ms."""
    feed = make()
    await feed.start()
    await feed.close()
    [options] = consumers.options
    assert options["group_id"] is None
    assert options["fetch_max_wait_ms"] == FEED_WAIT_MS
    assert {key: options[key] for key in expected} == expected


async def test_the_rollout_feed_folds_records_into_its_book(consumers: Consumers) -> None:
    consumers.next = FakeConsumer([[FakeRecord(b"m", b"not a record"), FakeRecord(b"m", None)]])
    feed = RolloutFeed("b:9092", RolloutBook())
    await feed.start()
    for _ in range(10):
        await asyncio.sleep(0)
    await feed.close()
    assert feed.book.invalid == 1  # the value reached the book (and was refused there)
    assert feed.book.get("m") is None
    assert feed.error is None


@pytest.mark.parametrize(
    ("tick_s", "expected_ms"),
    [
        pytest.param(5.0, 2000, id="the-scaler-default-tick"),
        pytest.param(2.0, 800, id="a-fast-tick-reads-fresher"),
        pytest.param(1.0, 500, id="never-below-the-asleep-wait"),
        pytest.param(60.0, 2000, id="never-above-2-s"),
    ],
)
def test_feed_wait_follows_the_readers_tick(tick_s: float, expected_ms: int) -> None:
    assert feed_wait_ms(tick_s) == expected_ms


class EndlessConsumer:
    """A topic of one partition that ends at offset 3 and gives records up to `stall_at`."""

    def __init__(self, stall_at: int) -> None:
        self.stall_at = stall_at
        self.position_now = 0
        self.polls_after_stall = 0
        self.stopped = False

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        self.stopped = True

    async def topics(self) -> set[str]:
        return {"t"}

    def partitions_for_topic(self, topic: str) -> set[int]:
        return {0}

    def assign(self, partitions: list[Any]) -> None:
        return None

    async def seek_to_beginning(self, *partitions: Any) -> None:
        return None

    async def end_offsets(self, partitions: list[Any]) -> dict[Any, int]:
        return {tp: 3 for tp in partitions}

    async def position(self, tp: Any) -> int:
        return self.position_now

    async def getmany(self, *partitions: Any, timeout_ms: int) -> dict[Any, list[FakeRecord]]:
        if self.position_now >= self.stall_at:
            self.polls_after_stall += 1
            return {}
        self.position_now += 1
        return {partitions[0]: [FakeRecord(b"k", str(self.position_now).encode())]}


@pytest.mark.parametrize(("stall_at", "read"), [(3, [b"1", b"2", b"3"]), (2, [b"1", b"2"])])
async def test_read_to_end_reads_to_the_end_or_says_where_it_stopped(
    stall_at: int, read: list[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    consumer = EndlessConsumer(stall_at)
    monkeypatch.setattr(feed_module, "make_consumer", lambda **_: consumer)
    folded: list[bytes | None] = []

    async def reading() -> bool:
        return await feed_module.read_to_end(
            "b:9092", "t", lambda k, v: folded.append(v), client_id="test"
        )

    if stall_at == 3:
        assert await reading() is True
    else:
        with pytest.raises(TimeoutError, match=r"could not read t to its end.*\{0: \(2, 3\)\}"):
            await reading()
        assert consumer.polls_after_stall == feed_module.READ_TO_END_PATIENCE_S
    assert folded == read
    assert consumer.stopped

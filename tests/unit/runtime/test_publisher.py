"""The publisher spreads records in batches and retries what failed."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
from aiokafka.errors import KafkaTimeoutError, MessageSizeTooLargeError

from services.runtime import publisher as publisher_module
from services.runtime.publisher import (
    MissingTopic,
    MissingTopics,
    Outgoing,
    Publisher,
    RecordSpread,
    StalePartition,
    UnknownTopic,
    error_text,
)
from tests.unit.runtime.fake_producer import FakeBatch, FakeProducer


class DrainingProducer(FakeProducer):
    """Like aiokafka's accumulator: one unsent batch a partition, and `send_batch` to it
    waits until that batch goes (1 ms here), then looks again."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting: Counter[int] = Counter()
        self.most_waiting = 0
        self._unsent: dict[int, asyncio.Event] = {}

    async def send_batch(
        self, batch: FakeBatch, topic: str, *, partition: int
    ) -> asyncio.Future[Any]:
        self.waiting[partition] += 1
        self.most_waiting = max(self.most_waiting, self.waiting[partition])
        while partition in self._unsent:
            await self._unsent[partition].wait()
        self.waiting[partition] -= 1
        gone = self._unsent[partition] = asyncio.Event()

        def depart() -> None:
            del self._unsent[partition]
            gone.set()

        asyncio.get_running_loop().call_later(0.001, depart)
        return await super().send_batch(batch, topic, partition=partition)


async def test_calls_take_turns_per_partition_instead_of_all_waiting_on_each_batch() -> None:
    """Regression: 200 concurrent one-record calls (a load generator on a slow broker) all
    woke on every batch's departure; the bench's loop spent itself on that."""
    producer = DrainingProducer()
    publisher = Publisher(producer)  # type: ignore[arg-type]

    calls = [
        publisher.send_all([Outgoing("known", None, f"v{i}".encode(), [])]) for i in range(200)
    ]
    acks = await asyncio.wait_for(asyncio.gather(*calls), 10)

    assert all(not isinstance(ack, BaseException) for [ack] in acks)
    assert sorted(v for _, values in producer.sent for v in values) == sorted(
        f"v{i}" for i in range(200)
    )
    assert producer.most_waiting == 1


class AwayProducer(DrainingProducer):
    """A broker that is away: a batch, once there, never goes."""

    async def send_batch(
        self, batch: FakeBatch, topic: str, *, partition: int
    ) -> asyncio.Future[Any]:
        self._unsent.setdefault(partition, asyncio.Event())
        return await super().send_batch(batch, topic, partition=partition)


async def test_callers_in_line_time_out_together_not_one_after_another() -> None:
    """Taking turns must not make each caller wait out the one before it: with the broker
    away, ten callers (four to one partition) all fail about one timeout after they began."""
    publisher = Publisher(AwayProducer(), patience_s=0.0, append_timeout_s=0.2)  # type: ignore[arg-type]
    loop = asyncio.get_running_loop()
    began = loop.time()

    acks = await asyncio.wait_for(
        asyncio.gather(
            *(publisher.send_all([Outgoing("known", None, b"v", [])]) for _ in range(10))
        ),
        5,
    )

    assert all(isinstance(ack, KafkaTimeoutError) for [ack] in acks)
    assert loop.time() - began < 0.6


async def test_a_failed_batch_is_retried_and_acks_keep_the_records_order() -> None:
    producer = FakeProducer(fail=1)
    publisher = Publisher(producer, patience_s=5)  # type: ignore[arg-type]

    records = [Outgoing("known", None, f"v{i}".encode(), []) for i in range(3)]
    acks = await asyncio.wait_for(publisher.send_all(records), 5)

    assert [(a.topic, a.offset) for a in acks] == [("known", 0), ("known", 1), ("known", 2)]
    assert [values for _, values in producer.sent] == [["v0", "v1", "v2"]], "sent once, together"


async def test_a_retried_batch_counts_once_in_the_spread() -> None:
    """Regression: a failed batch's records counted against its partition and again where
    their retry went, so later calls avoided a partition that had received nothing."""
    producer = FakeProducer(fail=1)
    publisher = Publisher(producer, patience_s=5)  # type: ignore[arg-type]

    five = [Outgoing("known", None, f"a{i}".encode(), []) for i in range(5)]
    await asyncio.wait_for(publisher.send_all(five), 5)
    for value in (b"b", b"c"):
        await publisher.send_all([Outgoing("known", None, value, [])])

    assert producer.sent[0] == (1, ["a0", "a1", "a2", "a3", "a4"]), "retried on the next one"
    assert producer.sent[1:] == [(2, ["b"]), (0, ["c"])], "partition 0 received nothing"


def test_a_partition_the_spread_does_not_have_gives_nothing_back() -> None:
    """A batch planned on a 12-partition topic fails after the topic came back with 3 (and
    the publisher's spread started over): its give-back must not break the new spread."""
    spread = RecordSpread(3)
    spread.give_back(10, 5)
    assert [spread.plan(1) for _ in range(3)] == [[(0, 1)], [(1, 1)], [(2, 1)]]


def test_record_spread_forgets_what_was_given_back() -> None:
    spread = RecordSpread(3)
    [(first, count)] = spread.plan(5)
    spread.give_back(first, count)

    assert spread.plan(1) == [(1, 1)]
    assert spread.plan(1) == [(2, 1)]
    assert spread.plan(1) == [(0, 1)], "partition 0 holds nothing: its failed five are gone"


async def test_a_small_call_goes_to_one_partition_the_next_to_another() -> None:
    producer = FakeProducer(room=2)
    publisher = Publisher(producer)  # type: ignore[arg-type]

    await publisher.send_all([Outgoing("known", None, f"v{i}".encode(), []) for i in range(5)])
    await publisher.send_all([Outgoing("known", None, b"w", [])])

    assert producer.sent == [(0, ["v0", "v1"]), (0, ["v2", "v3"]), (0, ["v4"]), (1, ["w"])]


async def test_a_large_call_is_split_over_the_partitions_when_asked() -> None:
    producer = FakeProducer()
    publisher = Publisher(producer, split_parts_of=16)  # type: ignore[arg-type]

    await publisher.send_all([Outgoing("known", None, f"v{i}".encode(), []) for i in range(40)])

    assert [(partition, len(values)) for partition, values in producer.sent] == [(0, 20), (1, 20)]
    assert [v for _, values in producer.sent for v in values] == [f"v{i}" for i in range(40)]


async def test_a_large_call_stays_one_batch_by_default() -> None:
    producer = FakeProducer()
    publisher = Publisher(producer)  # type: ignore[arg-type]

    await publisher.send_all([Outgoing("known", None, f"v{i}".encode(), []) for i in range(40)])
    await publisher.send_all([Outgoing("known", None, b"w", [])])

    assert [(partition, len(values)) for partition, values in producer.sent] == [(0, 40), (1, 1)]


@pytest.mark.parametrize(
    ("partitions", "min_part", "calls", "plans"),
    [
        pytest.param(
            3,
            16,
            [1, 1, 1, 1],
            [[(0, 1)], [(1, 1)], [(2, 1)], [(0, 1)]],
            id="small-calls-take-turns",
        ),
        pytest.param(3, 16, [48], [[(0, 16), (1, 16), (2, 16)]], id="a-large-call-is-split"),
        pytest.param(2, 16, [100], [[(0, 50), (1, 50)]], id="at-most-one-part-a-partition"),
        pytest.param(3, 16, [35], [[(0, 18), (1, 17)]], id="parts-within-one-record"),
        pytest.param(
            3,
            16,
            [20, 1, 1, 1],
            [[(0, 20)], [(1, 1)], [(2, 1)], [(1, 1)]],
            id="a-large-part-is-made-up-for",
        ),
        pytest.param(1, 16, [3, 40], [[(0, 3)], [(0, 40)]], id="one-partition"),
        pytest.param(
            3, None, [40, 1, 1, 1], [[(0, 40)], [(1, 1)], [(2, 1)], [(1, 1)]], id="never-split"
        ),
    ],
)
def test_record_spread_plans_parts_for_the_least_handed_partitions(
    partitions: int, min_part: int | None, calls: list[int], plans: list[list[tuple[int, int]]]
) -> None:
    spread = RecordSpread(partitions, min_part=min_part)

    assert [spread.plan(records) for records in calls] == plans


def test_record_spread_keeps_partitions_within_one_part() -> None:
    spread, handed = RecordSpread(12, min_part=16), [0] * 12
    calls = [256, 3, 32, 128, 17, 32, 1, 200] * 50  # a closed loop's repeating calls

    for records in calls:
        for partition, count in spread.plan(records):
            handed[partition] += count

    assert sum(handed) == sum(calls)
    assert max(handed) - min(handed) <= 32


@pytest.mark.parametrize(
    "topic",
    [
        pytest.param("gone", id="a-topic-of-the-producers"),
        pytest.param("inferbus.results.acme", id="an-operators-results-topic"),
    ],
)
async def test_a_reply_topic_nobody_created_fails_alone_at_once_and_is_remembered(
    topic: str,
) -> None:
    producer = FakeProducer()
    publisher = Publisher(producer, patience_s=30, metadata_timeout_s=0.3)  # type: ignore[arg-type]

    acks = await asyncio.wait_for(
        publisher.send_all([Outgoing("known", None, b"a", []), Outgoing(topic, None, b"b", [])]),
        2.0,
    )

    assert not isinstance(acks[0], BaseException) and acks[0].offset == 0
    assert isinstance(acks[1], MissingTopic), "the broker said so: not retried for 30 s"
    assert f"{topic!r} does not exist" in str(acks[1])
    # Never named to the producer's metadata: aiokafka's client would ask for it at every
    # refresh (a storm that held co-sent results 30 s against `inferbus up`).
    assert producer.lookups == [] and producer._topics == {"known"}
    listings = producer.listings
    assert listings >= 2, "listed again before it is called missing (made a moment ago?)"
    [again] = await publisher.send_all([Outgoing(topic, None, b"c", [])])
    assert isinstance(again, MissingTopic)
    assert producer.listings == listings, "looked up once, then remembered"


@pytest.mark.parametrize(
    ("topic", "broker_answers"),
    [
        pytest.param("inferbus.results", True, id="inferbus-own-topic-comes-back-after-restart"),
        pytest.param("team-a.results", False, id="broker-away-cannot-say"),
    ],
)
async def test_a_topic_that_may_come_back_is_retried_until_patience(
    topic: str, broker_answers: bool
) -> None:
    producer = FakeProducer(broker_answers=broker_answers)
    publisher = Publisher(producer, patience_s=0.5)  # type: ignore[arg-type]

    [ack] = await asyncio.wait_for(publisher.send_all([Outgoing(topic, None, b"b", [])]), 5)

    assert isinstance(ack, UnknownTopic) and not isinstance(ack, MissingTopic)
    if not broker_answers:
        assert str(ack).endswith("the broker does not answer (KafkaConnectionError: broker away)")
    assert producer.listings >= 2, "asked again on each try"
    assert producer.lookups == []


async def test_records_for_known_topics_go_out_while_an_unknown_one_is_looked_up() -> None:
    """A result for a reply topic that must be looked up (slowly) must not hold back the
    other results of the same call (it held a worker's whole batch for 5 s)."""
    producer = FakeProducer(lookup_s=0.5)
    publisher = Publisher(producer, patience_s=0)  # type: ignore[arg-type]

    call = asyncio.create_task(
        publisher.send_all([Outgoing("gone", None, b"b", []), Outgoing("known", None, b"a", [])])
    )
    await asyncio.sleep(0.1)

    assert producer.sent == [(0, ["a"])], "sent before the lookup ended"
    assert not call.done()
    acks = await asyncio.wait_for(call, 2)
    assert isinstance(acks[0], MissingTopic) and not isinstance(acks[1], BaseException)


async def test_unknown_topics_of_one_call_are_looked_up_together() -> None:
    producer = FakeProducer(lookup_s=0.05)
    publisher = Publisher(producer, patience_s=0, metadata_timeout_s=0.2)  # type: ignore[arg-type]

    acks = await publisher.send_all([Outgoing(f"gone-{i}", None, b"b", []) for i in range(3)])

    assert all(isinstance(ack, MissingTopic) for ack in acks)
    assert producer.listings == 2, "one listing a round for the call's three topics"


async def test_a_topic_the_broker_lists_is_then_asked_of_the_producer() -> None:
    producer = FakeProducer(listed=("team-a.results",))
    publisher = Publisher(producer, patience_s=0)  # type: ignore[arg-type]

    [ack] = await publisher.send_all([Outgoing("team-a.results", None, b"b", [])])

    assert not isinstance(ack, BaseException)
    assert producer.lookups == ["team-a.results"]


async def test_a_record_too_large_for_any_batch_fails_alone() -> None:
    producer = FakeProducer(room=0)
    publisher = Publisher(producer, patience_s=30)  # type: ignore[arg-type]

    [ack] = await asyncio.wait_for(
        publisher.send_all([Outgoing("known", None, b"x" * 10, [])]), 1.0
    )

    assert isinstance(ack, MessageSizeTooLargeError), "permanent: not retried for 30 s"


async def test_records_too_large_for_any_batch_do_not_count_in_the_spread() -> None:
    producer = FakeProducer(room=0)
    publisher = Publisher(producer)  # type: ignore[arg-type]
    await publisher.send_all([Outgoing("known", None, b"x", []) for _ in range(5)])
    producer.room = 100

    for value in (b"a", b"b", b"c"):
        await publisher.send_all([Outgoing("known", None, value, [])])

    assert producer.sent == [(1, ["a"]), (2, ["b"]), (0, ["c"])], "partition 0 got nothing"


@pytest.mark.parametrize(
    ("error", "text"),
    [
        pytest.param(
            MissingTopic("topic 'x' does not exist"),
            "MissingTopic: topic 'x' does not exist",
            id="kafka-error-names-itself",
        ),
        pytest.param(TimeoutError("no ack"), "TimeoutError: no ack", id="plain-error"),
        pytest.param(TimeoutError(), "TimeoutError: no detail", id="no-text"),
    ],
)
def test_a_send_error_is_named_once(error: BaseException, text: str) -> None:
    assert error_text(error) == text


async def test_a_publisher_remembers_the_spread_of_its_recent_topics_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("services.runtime.publisher.SPREADS_KEPT", 2)
    producer = FakeProducer(topics={"a", "b", "c"})
    publisher = Publisher(producer)  # type: ignore[arg-type]

    for topic in ("a", "b", "a", "c", "a", "b"):
        await publisher.send_all([Outgoing(topic, None, b"v", [])])

    # "a" kept its spread all along; "b", the least recently used when "c" came, starts
    # over at partition 0 (remembered, it would have gone to 1)
    assert [partition for partition, _ in producer.sent] == [0, 0, 1, 0, 2, 0]


class ShrunkTopicProducer(FakeProducer):
    """aiokafka's check of a batch's partition against its metadata fails for the first
    `refusals` batches (None: every one), as after the topic came back with fewer."""

    def __init__(self, refusals: int | None) -> None:
        super().__init__()
        self.refusals = refusals

    async def send_batch(
        self, batch: FakeBatch, topic: str, *, partition: int
    ) -> asyncio.Future[Any]:
        if self.refusals is None or self.refusals > 0:
            if self.refusals is not None:
                self.refusals -= 1
            raise AssertionError("Unrecognized partition")
        return await super().send_batch(batch, topic, partition=partition)


async def test_a_batch_refused_for_a_partition_the_topic_lost_is_retried() -> None:
    """Regression: aiokafka's AssertionError("Unrecognized partition") came out of send_all."""
    producer = ShrunkTopicProducer(refusals=1)
    publisher = Publisher(producer, patience_s=5)  # type: ignore[arg-type]

    records = [Outgoing("known", None, f"v{i}".encode(), []) for i in range(3)]
    acks = await asyncio.wait_for(publisher.send_all(records), 5)

    assert [(a.topic, a.offset) for a in acks] == [("known", 0), ("known", 1), ("known", 2)]
    assert [values for _, values in producer.sent] == [["v0", "v1", "v2"]]


async def test_a_partition_refused_every_time_fails_each_record_instead_of_the_call() -> None:
    producer = ShrunkTopicProducer(refusals=None)
    publisher = Publisher(producer, patience_s=0)  # type: ignore[arg-type]

    records = [Outgoing("known", None, f"v{i}".encode(), []) for i in range(3)]
    acks = await asyncio.wait_for(publisher.send_all(records), 5)

    assert all(isinstance(ack, StalePartition) for ack in acks)
    assert all(isinstance(ack, UnknownTopic) and ack.retriable for ack in acks)
    assert "AssertionError: Unrecognized partition" in str(acks[0])


class ShrinkingProducer(FakeProducer):
    """A topic of 12 partitions that comes back with 4 once its first batch is handed over;
    `send_batch` checks the partition as aiokafka 0.14 does."""

    def __init__(self) -> None:
        super().__init__()
        self.partitions = 12

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        return set(range(self.partitions)) if topic in self.topics else None

    async def send_batch(
        self, batch: FakeBatch, topic: str, *, partition: int
    ) -> asyncio.Future[Any]:
        assert partition in self.partitions_for_topic(topic), "Unrecognized partition"  # type: ignore[operator]
        future = await super().send_batch(batch, topic, partition=partition)
        self.partitions = 4
        return future


async def test_parts_planned_on_partitions_the_topic_lost_go_to_those_it_has() -> None:
    producer = ShrinkingProducer()
    publisher = Publisher(producer, patience_s=5, split_parts_of=1)  # type: ignore[arg-type]

    records = [Outgoing("known", None, f"v{i}".encode(), []) for i in range(8)]
    acks = await asyncio.wait_for(publisher.send_all(records), 5)

    assert not any(isinstance(ack, BaseException) for ack in acks)
    assert sorted(v for _, values in producer.sent for v in values) == [f"v{i}" for i in range(8)]
    assert all(partition < 4 for partition, _ in producer.sent[4:]), "retried on the four"


@pytest.mark.parametrize(
    ("ages_s", "kept", "remembered"),
    [
        pytest.param([0, 0, 0, 0, 0], 3, ["t2", "t3", "t4"], id="past-the-cap-the-oldest-go"),
        pytest.param([0, 20, 15], 10, ["t1", "t2"], id="an-expired-one-goes-at-the-next-add"),
        pytest.param([0, 10, 10], 10, ["t0", "t1", "t2"], id="a-recent-one-stays"),
    ],
)
def test_missing_topics_are_remembered_for_a_while_and_at_most_a_cap(
    ages_s: list[float], kept: int, remembered: list[str]
) -> None:
    """`ages_s`: the fake clock's steps before each `add` of t0, t1, ... (memory 30 s)."""
    now = [0.0]
    missing = MissingTopics(30.0, lambda: now[0], kept=kept)

    for n, step in enumerate(ages_s):
        now[0] += step
        missing.add(f"t{n}")

    assert len(missing) == len(remembered)
    assert [f"t{n}" for n in range(len(ages_s)) if f"t{n}" in missing] == remembered


def test_a_missing_topic_asked_after_its_memory_is_forgotten() -> None:
    now = [0.0]
    missing = MissingTopics(30.0, lambda: now[0])
    missing.add("gone")

    now[0] = 29.9
    assert missing.recent("gone")
    now[0] = 30.0
    assert not missing.recent("gone")
    assert "gone" not in missing and len(missing) == 0


async def test_a_flood_of_distinct_missing_reply_topics_is_remembered_up_to_the_cap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Regression: one entry per distinct missing name, never pruned (10k names, 10k
    entries); `inferbus.results.<anything>` is a legal reply_to."""
    monkeypatch.setattr("services.runtime.publisher.MISSING_TOPICS_KEPT", 5)
    publisher = Publisher(FakeProducer(), patience_s=0, metadata_timeout_s=0.05)  # type: ignore[arg-type]

    flood = [Outgoing(f"inferbus.results.x-{i}", None, b"v", []) for i in range(50)]
    acks = await asyncio.wait_for(publisher.send_all(flood), 5)

    assert all(isinstance(ack, MissingTopic) for ack in acks)
    assert len(publisher._missing) == 5
    assert "inferbus.results.x-49" in publisher._missing, "the newest kept, the oldest gone"


class SilentProducer(FakeProducer):
    """A broker that takes batches and never answers (frozen, or cut off by the network)."""

    async def send_batch(
        self, batch: FakeBatch, topic: str, *, partition: int
    ) -> asyncio.Future[Any]:
        self.sent.append((partition, [v.decode() for v in batch.values]))
        return asyncio.get_running_loop().create_future()


@pytest.mark.parametrize("patience_s", [0.2, 0.6])
async def test_acks_a_silent_broker_never_sends_fail_within_the_patience(
    monkeypatch: pytest.MonkeyPatch, patience_s: float
) -> None:
    """Regression: acks were awaited as long as aiokafka waits (its request timeout, each
    try): a client 8 s patient took 85 s to fail on a frozen broker."""
    monkeypatch.setattr(publisher_module, "LAST_TRY_ACK_S", 0.1)
    producer = SilentProducer()
    publisher = Publisher(producer, patience_s=patience_s)  # type: ignore[arg-type]
    loop = asyncio.get_running_loop()
    began = loop.time()

    acks = await asyncio.wait_for(
        publisher.send_all([Outgoing("known", None, b"v", []) for _ in range(3)]), 5
    )

    took = loop.time() - began
    assert all(isinstance(ack, KafkaTimeoutError) for ack in acks)
    assert "no ack within" in str(acks[0])
    assert patience_s <= took < patience_s + 0.5
    assert producer.sent  # it was handed over: a repeat may still arrive, dropped by id


async def test_a_last_try_still_gets_time_for_its_acks(monkeypatch: pytest.MonkeyPatch) -> None:
    """A try that starts as the patience ends is not failed before its acks can come."""
    monkeypatch.setattr(publisher_module, "LAST_TRY_ACK_S", 0.3)

    class SlowAcks(FakeProducer):
        async def send_batch(
            self, batch: FakeBatch, topic: str, *, partition: int
        ) -> asyncio.Future[Any]:
            future = await super().send_batch(batch, topic, partition=partition)
            late: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            asyncio.get_running_loop().call_later(0.15, late.set_result, future.result())
            return late

    publisher = Publisher(SlowAcks(), patience_s=0.01)  # type: ignore[arg-type]

    acks = await publisher.send_all([Outgoing("known", None, b"v", [])])

    assert not isinstance(acks[0], BaseException)

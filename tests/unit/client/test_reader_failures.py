"""The client's result reader outlives its consumer's failures; stop closes what it holds."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from aiokafka.errors import KafkaConnectionError, KafkaError
from aiokafka.structs import ConsumerRecord, RecordMetadata, TopicPartition

from infra.gaps import GapGuard
from infra.topics import BROKER_EVENT_KEY
from schemas.result import InferenceResult
from schemas.topics import INSTANCES
from services.client import client as client_module
from services.client.client import InferenceClient, reader_retry_s
from services.client.wire import WireRequest
from tests.unit.client.test_client import REPLY, record

TP = TopicPartition(REPLY, 0)


class _Log:
    """The reply partition's log, shared by every consumer made (the broker's)."""

    def __init__(self) -> None:
        self.records: list[ConsumerRecord[bytes, bytes]] = []
        self.changed = asyncio.Event()

    def append(self, request_id: str) -> None:
        value = InferenceResult(request_id=request_id, model="m", status="ok")
        self.records.append(record(value.model_dump_json().encode(), len(self.records)))
        self.notify()

    def notify(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()


class _Consumer:
    """Reads `log` from its position; raises what `fail` queued, once each, at a poll."""

    def __init__(self, log: _Log, started: asyncio.Queue[_Consumer]) -> None:
        self.log = log
        self.started = started
        self.position = 0
        self.assigned: list[TopicPartition] = []
        self.sought: dict[TopicPartition, int] = {}
        self.failures: list[BaseException] = []
        self.start_error: BaseException | None = None
        self.stopped = False

    async def start(self) -> None:
        if self.start_error is not None:
            raise self.start_error
        # Its maker assigns and seeks before it next yields: taken from here, it is placed.
        self.started.put_nowait(self)

    async def stop(self) -> None:
        self.stopped = True

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        return {0} if topic == REPLY else None

    async def topics(self) -> set[str]:
        return {REPLY}

    def assign(self, partitions: list[TopicPartition]) -> None:
        self.assigned = list(partitions)

    def assignment(self) -> set[TopicPartition]:
        return set(self.assigned)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.sought[tp] = self.position = offset

    def fail(self, exc: BaseException) -> None:
        self.failures.append(exc)
        self.log.notify()  # the reader's wait for records ends now

    async def getmany(self, *_: Any, timeout_ms: int = 0, **__: Any) -> dict[Any, Any]:
        if not self.failures and self.position >= len(self.log.records):
            try:
                await asyncio.wait_for(self.log.changed.wait(), timeout_ms / 1000)
            except TimeoutError:
                return {}
        if self.failures:
            raise self.failures.pop(0)
        records = self.log.records[self.position :]
        self.position = len(self.log.records)
        return {TP: records} if records else {}


class _Producer:
    def __init__(self) -> None:
        self.stopped = False
        # The restart watch asks it which ingest partitions exist: none here.
        self.client = SimpleNamespace(cluster=SimpleNamespace(partitions_for_topic=lambda _: None))

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        self.stopped = True


class _AckingPublisher:
    """Acks every record at offset 0, as the broker would, without one; says whose."""

    def __init__(self, sent: asyncio.Queue[bytes]) -> None:
        self.sent = sent

    async def send_all(self, outgoing: list[Any]) -> list[RecordMetadata]:
        for o in outgoing:
            self.sent.put_nowait(o.key)  # the request id: no tenant
        return [
            RecordMetadata(o.topic, 0, TopicPartition(o.topic, 0), 0, 0, 0, 0) for o in outgoing
        ]


class _Broker:
    """What `start` makes, without a broker: every consumer made and the producer."""

    def __init__(self, log: _Log) -> None:
        self.log = log
        self.consumers: list[_Consumer] = []
        self.producer = _Producer()
        self.started: asyncio.Queue[_Consumer] = asyncio.Queue()
        """Each consumer as it starts, the client's first too."""
        self.sent: asyncio.Queue[bytes] = asyncio.Queue()
        """The ids of requests produced, as they are."""
        self.start_errors: list[BaseException | None] = []
        """For the consumers made after the first, in turn: what their start raises."""

    async def rebuilt(self) -> _Consumer:
        """The next consumer started after the client's first, assigned and sought."""
        while (consumer := await asyncio.wait_for(self.started.get(), 2)) is self.consumers[0]:
            pass
        return consumer

    def make_consumer(self, **_: Any) -> _Consumer:
        consumer = _Consumer(self.log, self.started)
        if self.consumers and self.start_errors:
            consumer.start_error = self.start_errors.pop(0)
        self.consumers.append(consumer)
        return consumer


@pytest.fixture
async def bus(monkeypatch: pytest.MonkeyPatch) -> _Broker:
    log = _Log()
    log.append("before-start")  # at the reply topic's end when the client starts: not read
    bus = _Broker(log)

    async def true_ends(consumer: Any, partitions: list[TopicPartition]) -> dict[Any, int]:
        return dict.fromkeys(partitions, len(log.records))

    monkeypatch.setattr(client_module, "make_consumer", bus.make_consumer)
    monkeypatch.setattr(client_module, "make_producer", lambda *_, **__: bus.producer)
    monkeypatch.setattr(client_module, "true_ends", true_ends)
    return bus


@pytest.fixture
async def client(bus: _Broker) -> AsyncIterator[InferenceClient]:
    client = InferenceClient("localhost:1", reply_to=REPLY)
    await client.start()
    client._publisher = _AckingPublisher(bus.sent)  # type: ignore[assignment]
    yield client
    await client.stop()


def _request(client: InferenceClient, request_id: str) -> WireRequest:
    return client.build_request("m", {"in": np.ones((1, 2), np.float32)}, request_id=request_id)


async def _infer(
    client: InferenceClient, bus: _Broker, *request_ids: str
) -> list[asyncio.Task[Any]]:
    """`infer` calls, sent and waiting for their results once this returns."""
    tasks = [
        asyncio.create_task(client.infer(_request(client, request_id), timeout_s=30))
        for request_id in request_ids
    ]
    sent = {(await asyncio.wait_for(bus.sent.get(), 2)).decode() for _ in request_ids}
    assert sent == set(request_ids)
    return tasks


# ---- a consumer whose fetcher died -------------------------------------------------------------


async def test_a_broken_consumer_is_rebuilt_where_it_stopped(
    client: InferenceClient, bus: _Broker
) -> None:
    [first] = await _infer(client, bus, "r1")
    bus.log.append("r1")
    assert (await asyncio.wait_for(first, 2)).request_id == "r1"
    old = bus.consumers[0]
    [second] = await _infer(client, bus, "r2")

    old.failures.append(KafkaError("fetcher died"))
    bus.log.append("r2")  # written while the consumer is broken: its poll raises

    assert (await asyncio.wait_for(second, 2)).request_id == "r2"
    assert old.stopped
    [_, new] = bus.consumers
    # Where the old one had read to, not the log's end (which would skip r2).
    assert new.sought == {TP: 2}


async def test_a_rebuild_that_cannot_start_is_tried_again(
    client: InferenceClient, bus: _Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(client_module, "READER_RETRY_S", 0.01)
    bus.start_errors = [KafkaError("broker away")]
    [waiting] = await _infer(client, bus, "r1")

    bus.consumers[0].fail(KafkaError("fetcher died"))
    bus.log.append("r1")

    assert (await asyncio.wait_for(waiting, 2)).request_id == "r1"
    [_, failed_start, new] = bus.consumers
    assert failed_start.stopped, "a consumer that failed to start is not left open"
    assert new.sought == {TP: 1}


async def test_a_restart_seen_before_a_rebuild_has_the_new_consumer_read_from_the_start(
    client: InferenceClient, bus: _Broker
) -> None:
    await client._broker_restarted()
    bus.consumers[0].fail(KafkaError("fetcher died"))  # before it read the log again

    assert (await bus.rebuilt()).sought == {TP: 0}


# ---- any other error ------------------------------------------------------------------------


async def test_another_error_fails_the_waiting_requests_now_and_reading_goes_on(
    client: InferenceClient, bus: _Broker, caplog: pytest.LogCaptureFixture
) -> None:
    waiting = await _infer(client, bus, "r1", "r2")

    bus.consumers[0].fail(RuntimeError("boom"))

    for task in waiting:
        with pytest.raises(RuntimeError, match="boom"):
            await asyncio.wait_for(task, 2)  # not the 30 s timeout
    [said] = [r for r in caplog.records if "client_reader_failed" in r.getMessage()]
    assert said.levelno == logging.ERROR
    assert said.exc_info is not None, "logged with its traceback"
    [later] = await _infer(client, bus, "r3")
    bus.log.append("r3")
    assert (await asyncio.wait_for(later, 2)).request_id == "r3"
    assert len(bus.consumers) == 1, "not a consumer's failure: it reads on"


async def test_a_result_that_cannot_be_handled_costs_the_rest_of_its_poll_nothing(
    client: InferenceClient,
    bus: _Broker,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    first, middle, last = await _infer(client, bus, "r1", "r2", "r3")
    parse = InferenceResult.from_wire

    def from_wire(value: bytes) -> InferenceResult:
        result = parse(value)
        if result.request_id == "r2":
            raise RuntimeError("cannot handle r2")
        return result

    monkeypatch.setattr(InferenceResult, "from_wire", staticmethod(from_wire))
    for request_id in ("r1", "r2", "r3"):  # one poll takes all three
        bus.log.append(request_id)

    assert (await asyncio.wait_for(first, 2)).request_id == "r1"
    assert (await asyncio.wait_for(last, 2)).request_id == "r3", "not lost with r2"
    with pytest.raises(RuntimeError, match="cannot handle r2"):
        await asyncio.wait_for(middle, 2)  # an error now, not the 30 s timeout
    [said] = [r for r in caplog.records if "result_not_delivered" in r.getMessage()]
    assert "offset=2" in said.getMessage(), "names the record"
    assert said.exc_info is not None, "with its traceback"
    assert not [r for r in caplog.records if "client_reader_failed" in r.getMessage()], "once"


async def test_a_restart_that_cannot_be_handled_still_lets_its_poll_deliver(
    client: InferenceClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A broker note and results in one poll: the restart's failure is raised (to the
    reader, which fails the waiting requests) only once the poll's results are delivered."""
    note = dataclasses.replace(
        record(b"restart-1"), topic=INSTANCES, key=BROKER_EVENT_KEY, offset=0
    )
    result = InferenceResult(request_id="r1", model="m", status="ok")
    answer = record(result.model_dump_json().encode(), offset=5)
    waiting: asyncio.Future[InferenceResult] = asyncio.get_running_loop().create_future()
    client._waiters["r1"] = [waiting]

    async def one_poll(*_: Any, **__: Any) -> dict[TopicPartition, list[Any]]:
        return {TopicPartition(INSTANCES, 0): [note], TP: [answer]}

    async def restart_fails() -> None:
        raise RuntimeError("restart handling failed")

    monkeypatch.setattr(client_module, "getmany_in_order", one_poll)
    monkeypatch.setattr(client, "_broker_restarted", restart_fails)

    with pytest.raises(RuntimeError, match="restart handling failed"):
        await client._read_once(GapGuard())

    assert waiting.done() and waiting.result().request_id == "r1", "delivered first"
    assert client._positions[TP] == 6


@pytest.mark.parametrize(
    ("failures", "wait_s"),
    [
        pytest.param(1, 0.0, id="first-at-once"),
        pytest.param(2, 0.1, id="second"),
        pytest.param(3, 0.2, id="doubles"),
        pytest.param(10, 5.0, id="capped"),
    ],
)
def test_reader_retry_s(failures: int, wait_s: float) -> None:
    assert reader_retry_s(failures) == pytest.approx(wait_s)


# ---- stop ------------------------------------------------------------------------------------


async def test_stop_closes_both_clients_after_the_reader_failed(
    bus: _Broker, caplog: pytest.LogCaptureFixture
) -> None:
    client = InferenceClient("localhost:1", reply_to=REPLY)
    await client.start()
    assert client._reader is not None
    client._reader.cancel()
    await asyncio.wait([client._reader])

    async def failed() -> None:
        raise RuntimeError("reader died")

    client._reader = asyncio.create_task(failed())
    await asyncio.wait([client._reader])

    await client.stop()  # logs the failure, does not raise it

    assert bus.consumers[0].stopped
    assert bus.producer.stopped
    assert any("reader died" in r.getMessage() for r in caplog.records if r.levelno >= 40)


async def test_stop_closes_the_rebuilt_consumer(bus: _Broker) -> None:
    client = InferenceClient("localhost:1", reply_to=REPLY)
    await client.start()
    bus.consumers[0].fail(KafkaError("fetcher died"))
    await bus.rebuilt()

    await client.stop()

    assert all(consumer.stopped for consumer in bus.consumers)
    assert bus.producer.stopped


# ---- resubmits -------------------------------------------------------------------------------


@pytest.mark.parametrize("waiting", [True, False], ids=["waiter-gets-it", "no-waiter-logged"])
async def test_a_resubmit_that_fails_otherwise_than_kafka_is_seen(
    client: InferenceClient,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    waiting: bool,
) -> None:
    async def produce(wire: Any) -> str:
        raise AssertionError("aiokafka producer state")

    monkeypatch.setattr(client, "_produce", produce)
    future: asyncio.Future[InferenceResult] = asyncio.get_running_loop().create_future()
    if waiting:
        client._waiters["r1"] = [future]
    client._pending["r1"] = _request(client, "r1")

    client._resubmit_pending()
    tasks = list(client._background)
    await asyncio.wait(tasks, timeout=2)

    assert all(task.done() and task.exception() is None for task in tasks)
    if waiting:
        assert isinstance(future.exception(), AssertionError)
    else:
        [said] = [r for r in caplog.records if "resubmit_failed" in r.getMessage()]
        assert said.levelno == logging.ERROR and said.exc_info is not None


async def test_a_client_that_cannot_reach_kafka_says_what_to_do(
    bus: _Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A newcomer with the stack stopped got aiokafka's bare "Unable to bootstrap from"."""

    async def refused() -> None:
        raise KafkaConnectionError("Unable to bootstrap from [('127.0.0.1', 9092, <AF_INET>)]")

    async def once(start: Any, *, what: str) -> Any:
        return await start()

    monkeypatch.setattr(bus.producer, "start", refused)
    monkeypatch.setattr(client_module, "start_with_retry", once)
    client = InferenceClient("127.0.0.1:9092", reply_to=REPLY)

    with pytest.raises(KafkaConnectionError, match="start the stack") as failed:
        await client.start()

    assert "cannot reach Kafka at 127.0.0.1:9092" in str(failed.value)
    assert "Unable to bootstrap" in str(failed.value), "aiokafka's own words kept"
    assert str(failed.value).count("KafkaConnectionError") == 1, "its name said once"
    assert bus.producer.stopped and bus.consumers[0].stopped, "nothing left open"

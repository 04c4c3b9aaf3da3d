"""DLQ records reach the broker: retried while refused, without their value if too large."""

from __future__ import annotations

import asyncio
import hashlib
import logging
from typing import Any

import pytest
from aiokafka.errors import MessageSizeTooLargeError, TopicAuthorizationFailedError

from schemas import headers as h
from schemas.topics import DLQ
from services.runtime.dead_letters import deliver_until_taken
from services.runtime.publisher import Outgoing, Publisher
from tests.unit.runtime.fake_producer import FakeBatch, FakeProducer


class SizeLimitedBroker(FakeProducer):
    """Refuses a batch holding a record over `limit_bytes` (value and headers counted), as
    a broker's message.max.bytes does: the ack fails with MessageSizeTooLargeError."""

    def __init__(self, limit_bytes: int) -> None:
        super().__init__(topics=(DLQ,))
        self.limit_bytes = limit_bytes
        self.taken: list[Outgoing] = []

    async def send_batch(
        self, batch: FakeBatch, topic: str, *, partition: int
    ) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if any(_size(record) > self.limit_bytes for record in batch.records):
            future.set_exception(MessageSizeTooLargeError())
            return future
        self.taken.extend(batch.records)
        return await super().send_batch(batch, topic, partition=partition)


def _size(record: Outgoing) -> int:
    return len(record.value) + sum(len(k) + len(v) for k, v in record.headers)


def _dead_letter(value: bytes) -> Outgoing:
    headers = h.dead_letter("no reply topic", topic="requests", partition=2, offset=7)
    return Outgoing(DLQ, b"request-1", value, headers)


async def test_a_dlq_copy_too_large_for_the_broker_goes_as_a_stub_without_its_value() -> None:
    """Regression: the broker refused a DLQ copy (the producer's bytes plus the error
    headers) it had taken as the original; the copy was dropped and the request lost."""
    producer = SizeLimitedBroker(limit_bytes=1000)
    original = _dead_letter(b"x" * 950)

    await asyncio.wait_for(deliver_until_taken(Publisher(producer), [original]), 5)  # type: ignore[arg-type]

    [stub] = producer.taken
    assert (stub.key, stub.value) == (b"request-1", b"")
    assert stub.headers[: len(original.headers)] == original.headers, "its headers kept"
    assert h.header(stub.headers, h.VALUE_BYTES) == "950"
    assert h.header(stub.headers, h.VALUE_SHA256) == hashlib.sha256(original.value).hexdigest()
    dropped = h.header(stub.headers, h.VALUE_DROPPED)
    assert dropped is not None and dropped.startswith("MessageSizeTooLargeError")


async def test_a_stub_refused_too_is_dropped_and_said_while_the_others_go(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The broker refuses the batch of both whole: the small one goes alone, value and all."""
    producer = SizeLimitedBroker(limit_bytes=150)
    small = Outgoing(DLQ, b"request-2", b"small", [])

    with caplog.at_level(logging.ERROR, logger="services.runtime.dead_letters"):
        await asyncio.wait_for(
            deliver_until_taken(Publisher(producer), [_dead_letter(b"x" * 950), small]),  # type: ignore[arg-type]
            5,
        )

    assert [(record.key, record.value) for record in producer.taken] == [(b"request-2", b"small")]
    lines = [r.getMessage() for r in caplog.records]
    [line] = [text for text in lines if "record_too_large_dropped" in text]
    assert "key=b'request-1'" in line and "bytes=950" in line


async def test_copies_refused_in_one_batch_each_go_alone_before_they_lose_their_value() -> None:
    """A broker refuses a record batch whole: the records that fit alone keep their value."""
    producer = SizeLimitedBroker(limit_bytes=1000)
    large = [_dead_letter(b"x" * 950), _dead_letter(b"y" * 990)]
    fits = _dead_letter(b"z" * 100)

    await asyncio.wait_for(deliver_until_taken(Publisher(producer), [*large, fits]), 5)  # type: ignore[arg-type]

    stubs = {h.header(r.headers, h.VALUE_BYTES): r for r in producer.taken if not r.value}
    assert [r.value for r in producer.taken if r.value] == [fits.value], "went alone, whole"
    assert sorted(stubs) == ["950", "990"]
    assert (
        h.header(stubs["990"].headers, h.VALUE_SHA256) == hashlib.sha256(large[1].value).hexdigest()
    )


class RefusingBroker(FakeProducer):
    """Refuses the first `refusals` batches with `error`, then takes every one."""

    def __init__(self, error: Exception, refusals: int) -> None:
        super().__init__(topics=(DLQ,))
        self.error = error
        self.refusals = refusals
        self.taken: list[Outgoing] = []

    async def send_batch(
        self, batch: FakeBatch, topic: str, *, partition: int
    ) -> asyncio.Future[Any]:
        if self.refusals > 0:
            self.refusals -= 1
            future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            future.set_exception(self.error)
            return future
        self.taken.extend(batch.records)
        return await super().send_batch(batch, topic, partition=partition)


async def test_a_dlq_refusal_is_retried_and_each_try_names_the_error(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A refusal no retry mends (an ACL on the DLQ topic) holds the record here: the
    operator's only clue is the line, so it says what the broker answered."""
    monkeypatch.setattr(asyncio, "sleep", _no_wait(asyncio.sleep))
    producer = RefusingBroker(TopicAuthorizationFailedError(), refusals=2)
    record = _dead_letter(b"x")

    with caplog.at_level(logging.ERROR, logger="services.runtime.dead_letters"):
        await asyncio.wait_for(deliver_until_taken(Publisher(producer), [record]), 5)  # type: ignore[arg-type]

    assert [r.value for r in producer.taken] == [b"x"], "taken once the broker allows it"
    lines = [r.getMessage() for r in caplog.records if "dlq_unreachable" in r.getMessage()]
    assert len(lines) == 2
    assert all(f"topic={DLQ}" in line and "TopicAuthorizationFailed" in line for line in lines)


def _no_wait(sleep: Any) -> Any:
    async def no_wait(_: float) -> None:
        await sleep(0)

    return no_wait

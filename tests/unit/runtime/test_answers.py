"""Results encoded by hand equal the model's own JSON; the publisher retries what failed."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest
from aiokafka.errors import KafkaTimeoutError

from schemas.frames import is_frame
from schemas.result import InferenceResult
from services.runtime.answers import Outgoing, Publisher, UnknownTopic, encode_result

OUTPUTS = {
    "embedding": np.linspace(-1, 1, 12, dtype=np.float32).reshape(2, 6),
    "label": np.array([[3], [7]], dtype=np.int64),
}
FIELDS: dict[str, Any] = {
    "request_id": "r-1",
    "model": "demo-encoder",
    "model_version": "2",
    "timings": {"queue_ms": 1.5, "infer_ms": 3.25, "e2e_ms": 9.0, "batch_wait_ms": None},
    "batch_size": 8,
    "worker_id": "w-1",
    "provider": "CPUExecutionProvider",
    "tenant": "team-a",
    "completed_at": "2026-01-01T00:00:00Z",
}


@pytest.mark.parametrize("form", ["list", "b64", "frame"])
def test_an_ok_result_reads_back_as_the_model_would_write_it(form: str) -> None:
    value = encode_result(status="ok", form=form, outputs=OUTPUTS, **FIELDS)  # type: ignore[arg-type]

    result = InferenceResult.from_wire(value)

    assert is_frame(value) is (form == "frame")
    assert result.ok and result.error is None
    assert result.timings.batch_wait_ms is None and result.timings.infer_ms == 3.25
    for name, array in OUTPUTS.items():
        np.testing.assert_array_equal(result.output(name), array)
        np.testing.assert_array_equal(result.outputs[name].to_numpy(), array)
    if form != "frame":
        again = result.model_dump_json(exclude_none=True).encode()
        assert InferenceResult.model_validate_json(again) == result


def test_an_error_result_carries_code_and_message() -> None:
    value = encode_result(
        request_id="r-2", model="m", status="invalid_input", error="input 'x' is wrong"
    )
    result = InferenceResult.from_wire(value)
    assert result.status == "invalid_input"
    assert result.error is not None
    assert (result.error.code, result.error.message) == ("invalid_input", "input 'x' is wrong")
    assert result.outputs == {}


class FakeProducer:
    """Fails the first `fail` sends, and any send to a topic it does not know."""

    def __init__(self, fail: int = 0, topics: tuple[str, ...] = ("known",)) -> None:
        self.fail = fail
        self.sent: list[str] = []
        self.topics = topics
        self.client = self

    @property
    def cluster(self) -> FakeProducer:
        return self

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        return {0} if topic in self.topics else None

    async def partitions_for(self, topic: str) -> set[int]:
        raise KafkaTimeoutError(f"no metadata for {topic}")

    async def send(self, topic: str, value: bytes, **_: Any) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if self.fail > 0:
            self.fail -= 1
            future.set_exception(KafkaTimeoutError("broker away"))
        else:
            self.sent.append(value.decode())
            future.set_result(("ack", value))
        return future


async def test_failed_sends_are_retried_alone_in_order_of_the_records() -> None:
    producer = FakeProducer(fail=1)
    publisher = Publisher(producer, attempts=3)  # type: ignore[arg-type]

    records = [Outgoing("known", None, f"v{i}".encode(), []) for i in range(3)]
    acks = await asyncio.wait_for(publisher.send_all(records), 5)

    assert [ack[1] for ack in acks] == [b"v0", b"v1", b"v2"]
    assert sorted(producer.sent) == ["v0", "v1", "v2"], "v0 sent once more, the others once"


async def test_records_for_a_missing_topic_fail_fast_and_alone() -> None:
    producer = FakeProducer()
    publisher = Publisher(producer, attempts=1)  # type: ignore[arg-type]

    acks = await publisher.send_all(
        [Outgoing("known", None, b"a", []), Outgoing("gone", None, b"b", [])]
    )

    assert acks[0] == ("ack", b"a")
    assert isinstance(acks[1], UnknownTopic)
    assert "gone" in str(acks[1])

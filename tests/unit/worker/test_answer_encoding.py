"""A result the wire cannot carry is answered `internal_error`, never left unanswered."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import orjson
import pytest
from aiokafka.errors import KafkaTimeoutError, MessageSizeTooLargeError

from schemas.topics import DLQ
from services.worker.execution import RequestOutcome
from tests.unit.worker.test_expiry import BusyHost, stalled_pipeline, waiting


def outcome(outputs: dict[str, np.ndarray]) -> RequestOutcome:
    return RequestOutcome(
        outputs=outputs, error=None, batch_size=2, infer_ms=1.0, assemble_ms=0.1, split_ms=0.1
    )


@pytest.mark.parametrize(
    ("outputs", "status"),
    [
        pytest.param({"y": np.ones((1, 4), np.float32)}, "ok", id="carried"),
        pytest.param({"y": np.ones((1, 4), np.complex64)}, "internal_error", id="not-carried"),
    ],
)
async def test_every_request_of_a_batch_is_answered(
    outputs: dict[str, np.ndarray], status: str
) -> None:
    pipeline, _, capture, _ = stalled_pipeline(BusyHost())
    good, other = waiting(1, 30.0), waiting(2, 30.0)
    ran = SimpleNamespace(
        outcomes=[outcome(outputs), outcome({"y": np.zeros((1, 4), np.float32)})],
        engine=SimpleNamespace(info=SimpleNamespace(provider="CPU", simulated=False)),
        version=SimpleNamespace(version="1"),
    )

    await pipeline.answer([good, other], ran)  # type: ignore[arg-type]

    results = {r["request_id"]: r for r in (orjson.loads(o.value) for o in capture.sent)}
    assert set(results) == {"r1", "r2"}
    assert results["r1"]["status"] == status
    assert results["r2"]["status"] == "ok"
    if status != "ok":
        assert "could not encode" in results["r1"]["error"]["message"]


class SmallBroker:
    """Takes records up to `limit` bytes; the reply topic rejects the error result too."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.taken: list[Any] = []

    async def send_all(self, records: list[Any]) -> list[Any]:
        acks: list[Any] = []
        for record in records:
            if len(record.value) > self.limit:
                acks.append(MessageSizeTooLargeError("too large"))
            elif record.topic != DLQ:
                acks.append(KafkaTimeoutError("reply topic away"))
            else:
                self.taken.append(record)
                acks.append(object())
        return acks


async def test_a_result_too_large_for_the_broker_reaches_the_dlq() -> None:
    """Neither the result nor its small error result could go to the reply topic: the DLQ
    gets the error result (the oversized result would be refused there too, and dropped)."""
    broker = SmallBroker(limit=4_000)
    pipeline, _, _, offsets = stalled_pipeline(BusyHost())
    pipeline.publisher = broker  # type: ignore[assignment]
    item = waiting(7, 30.0)
    item.epoch = pipeline.took(item.topic, item.partition, item.offset)
    ran = SimpleNamespace(
        outcomes=[outcome({"y": np.ones((1, 2_000), np.float32)})],  # ~27 kB as a list
        engine=SimpleNamespace(info=SimpleNamespace(provider="CPU", simulated=False)),
        version=SimpleNamespace(version="1"),
    )

    await pipeline.answer([item], ran)  # type: ignore[arg-type]

    [dead] = broker.taken
    assert orjson.loads(dead.value)["request_id"] == "r7"
    assert "more than the broker takes" in orjson.loads(dead.value)["error"]["message"]
    assert offsets.committable() == {(item.topic, item.partition): 8}

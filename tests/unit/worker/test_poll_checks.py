"""A poll's token ids are checked together: a bad request among good ones is answered with
its own message, the good ones are queued, and a defect in the check answers, not drops."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
from aiokafka.structs import ConsumerRecord

from services.models.demo import encoder_config
from tests.unit.worker.test_expiry import Capture, PollingHost, stalled_pipeline

TOPIC = "inferbus.req.demo-encoder.batch"


@dataclass
class EncoderVersion:
    version: str = "1"
    config: Any = field(default_factory=encoder_config)


class EncoderHost(PollingHost):
    version = EncoderVersion()  # type: ignore[assignment]
    index_limits = {"input_ids": 50}


def polled(offset: int, ids: list[int]) -> ConsumerRecord[bytes, bytes]:
    shape = [1, len(ids)]
    value = orjson.dumps(
        {
            "request_id": f"r{offset}",
            "model": "demo-encoder",
            "inputs": {
                "input_ids": {"dtype": "int64", "shape": shape, "data": [ids]},
                "attention_mask": {"dtype": "int64", "shape": shape, "data": [[1] * len(ids)]},
            },
        }
    )
    return ConsumerRecord(TOPIC, 0, offset, int(time.time() * 1000), 0, None, value, None, 0,
                          len(value), [])  # fmt: skip


async def answered(capture: Capture) -> list[dict[str, Any]]:
    for _ in range(50):
        await asyncio.sleep(0.01)
        if capture.sent:
            break
    return [orjson.loads(record.value) for record in capture.sent]


async def test_the_bad_request_of_a_poll_is_answered_and_the_good_ones_are_queued() -> None:
    pipeline, batcher, capture, offsets = stalled_pipeline(EncoderHost())

    pipeline.take([polled(0, [5, 6]), polled(1, [5, 99]), polled(2, [7, 8, 9])], "batch")

    [bad] = await answered(capture)
    assert (bad["request_id"], bad["status"]) == ("r1", "invalid_input")
    assert "token id 99" in bad["error"]["message"]
    assert batcher.queued_samples("batch") == 2
    assert pipeline.in_hand == 2
    assert offsets.committable() == {(TOPIC, 0): 0}, "offset 0 is still in the batcher"


async def test_a_defect_in_the_poll_check_answers_its_requests(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import services.worker.inhand as inhand

    def broken(*args: Any) -> Any:
        raise ZeroDivisionError("check defect")

    monkeypatch.setattr(inhand, "index_errors", broken)
    pipeline, batcher, capture, _ = stalled_pipeline(EncoderHost())

    pipeline.take([polled(0, [5, 6]), polled(1, [7, 8])], "batch")

    results = await answered(capture)
    assert sorted(r["request_id"] for r in results) == ["r0", "r1"]
    assert {r["status"] for r in results} == {"internal_error"}
    assert "ZeroDivisionError" in results[0]["error"]["message"]
    assert batcher.queued_samples("batch") == 0 and pipeline.in_hand == 0

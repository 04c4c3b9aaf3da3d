"""A request arrives at its Kafka record's timestamp, capped at ingest's clock: a producer's
clock running ahead neither extends a `timeout_ms` deadline nor hides ingest's lag."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from pathlib import Path

import pytest
from aiokafka.structs import ConsumerRecord

from schemas import headers as h
from schemas.topics import INGEST
from services.ingest.handlers import arrival
from tests.unit.ingest.conftest import NOW
from tests.unit.ingest.test_undeliverable import EVENT, FailingPublisher, service

HOUR_MS = 3_600_000
NOW_MS = int(NOW.timestamp() * 1000)


@pytest.mark.parametrize(
    ("record_ms", "expected"),
    [
        pytest.param(NOW_MS + HOUR_MS, NOW, id="future: now"),
        pytest.param(NOW_MS + 1, NOW, id="a ms ahead: now"),
        pytest.param(NOW_MS, NOW, id="now"),
        pytest.param(NOW_MS - 1, NOW - timedelta(milliseconds=1), id="a ms past: kept"),
        pytest.param(NOW_MS - HOUR_MS, NOW - timedelta(hours=1), id="an hour past: kept"),
        pytest.param(-1, NOW, id="no timestamp: now"),
    ],
)
def test_arrival_is_the_record_timestamp_capped_at_now(record_ms: int, expected: object) -> None:
    assert arrival(record_ms, NOW) == expected


def at(timestamp_ms: int, **changes: object) -> ConsumerRecord[bytes, bytes]:
    value = json.dumps({**EVENT, **changes}).encode()
    return ConsumerRecord(INGEST, 0, 7, timestamp_ms, 0, None, value, None, len(value), 0, ())


@pytest.mark.parametrize(
    ("offset_ms", "changes", "status", "deadline_ms"),
    [
        # A producer clock an hour ahead: the deadline is 1 s after ingest saw it, not 1 h.
        pytest.param(HOUR_MS, {"timeout_ms": 1000}, None, 1000, id="future"),
        pytest.param(HOUR_MS, {"tier": "batch"}, None, None, id="future-batch: not shed"),
        pytest.param(0, {"timeout_ms": 60_000}, None, 60_000, id="now"),
        # A record that (says it) waited an hour did: expired, and ingest is behind.
        pytest.param(-HOUR_MS, {"timeout_ms": 1000}, "deadline_exceeded", None, id="past"),
        pytest.param(-HOUR_MS, {"tier": "batch"}, "rejected_overload", None, id="past-batch"),
    ],
)
async def test_a_request_counts_from_its_arrival(
    tmp_path: Path,
    offset_ms: int,
    changes: dict[str, object],
    status: str | None,
    deadline_ms: int | None,
) -> None:
    publisher = FailingPublisher(())
    ingest = service(tmp_path, publisher)
    before_ms = int(time.time() * 1000)
    await ingest.handle([at(before_ms + offset_ms, **changes)])
    after_ms = int(time.time() * 1000)

    [sent] = publisher.sent
    if status is not None:
        result = json.loads(sent.value)
        assert result["status"] == status, result
        return
    assert sent.topic.startswith("inferbus.req.demo-mlp."), sent.topic
    produced = h.header_float(sent.headers, h.PRODUCED_AT)
    assert produced is not None and before_ms <= produced <= after_ms
    deadline = h.header_float(sent.headers, h.DEADLINE)
    if deadline_ms is None:
        assert deadline is None
    else:
        assert deadline is not None and abs(deadline - (produced + deadline_ms)) <= 1

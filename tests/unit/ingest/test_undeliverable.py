"""Sends that fail after the producer's retries are answered or dead-lettered, never a stall."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from aiokafka.errors import KafkaTimeoutError
from aiokafka.structs import ConsumerRecord, RecordMetadata

from schemas import headers as h
from schemas.frames import is_frame, join_frame
from schemas.result import InferenceResult
from schemas.topics import DLQ, INGEST, RESULTS
from services.ingest.app import IngestService
from services.ingest.settings import IngestSettings
from services.models.demo import write_demo_models
from services.runtime.publisher import Outgoing

EVENT = {
    "schema_version": 1,
    "request_id": "r-undeliverable",
    "model": "demo-mlp",
    "inputs": {"x": {"dtype": "float32", "shape": [1, 16], "data": [[0.5] * 16]}},
}


def record(value: bytes) -> ConsumerRecord[bytes, bytes]:
    return ConsumerRecord(INGEST, 0, 7, 0, 0, None, value, None, len(value), 0, ())


class FailingPublisher:
    """Acks every record except those bound for `failing` topics (the first `times` tries)."""

    def __init__(self, failing: tuple[str, ...], times: int = 10**9) -> None:
        self.failing = failing
        self.times = times
        self.sent: list[Outgoing] = []

    async def send_all(self, records: Sequence[Outgoing]) -> list[Any]:
        out: list[Any] = []
        for outgoing in records:
            if outgoing.topic.startswith(self.failing) and self.times > 0:
                self.times -= 1
                out.append(KafkaTimeoutError(f"no metadata for {outgoing.topic}"))
            else:
                self.sent.append(outgoing)
                out.append(RecordMetadata(outgoing.topic, 0, None, len(self.sent), -1, -1, -1))
        return out


def service(tmp_path: Path, publisher: FailingPublisher) -> IngestService:
    write_demo_models(tmp_path)
    ingest = IngestService("127.0.0.1:1", IngestSettings(models_dir=tmp_path))
    ingest.publisher = publisher  # type: ignore[assignment]
    return ingest


async def test_a_route_that_cannot_be_sent_is_answered_internal_error(tmp_path: Path) -> None:
    publisher = FailingPublisher(("inferbus.req.",))
    ingest = service(tmp_path, publisher)
    await ingest.handle([record(json.dumps(EVENT).encode())])
    [answer] = publisher.sent
    result = json.loads(answer.value)
    assert answer.topic == RESULTS
    assert result["status"] == "internal_error"
    assert "inferbus.req.demo-mlp.interactive" in result["error"]["message"]
    assert ingest.depths.depth("inferbus.req.demo-mlp.interactive") in (None, 0)
    assert ingest.offsets.in_flight(INGEST, 0) == 0, "the record counts as answered"


async def test_when_the_answer_fails_too_the_original_goes_to_the_dlq(tmp_path: Path) -> None:
    publisher = FailingPublisher(("inferbus.req.", "team-replies"))
    ingest = service(tmp_path, publisher)
    value = json.dumps({**EVENT, "reply_to": "team-replies"}).encode()
    await ingest.handle([record(value)])
    [dead] = publisher.sent
    assert dead.topic == DLQ
    assert dead.value == value, "the producer's original bytes"
    assert h.header(dead.headers, h.ERROR_CODE) == "undeliverable"
    assert "team-replies" in (h.header(dead.headers, h.ERROR_MESSAGE) or "")


F64 = {"dtype": "float64", "shape": [1, 16], "data": [[0.5] * 16]}


@pytest.mark.parametrize(
    ("changes", "framed", "status", "message"),
    [
        pytest.param(
            {"inputs": {"x": F64}},
            False,
            "invalid_input",
            "input 'x' must be float32, got float64",
            id="invalid-input",
        ),
        pytest.param(
            {"model": "nomodel"},
            False,
            "model_not_found",
            "model 'nomodel' is not in the repository",
            id="model-not-found",
        ),
        pytest.param(
            {"inputs": {"x": F64}},
            True,
            "invalid_input",
            "input 'x' must be float32, got float64",
            id="invalid-input-framed",
        ),
    ],
)
async def test_an_error_answer_that_cannot_be_sent_goes_to_the_dlq_as_the_result(
    tmp_path: Path, changes: dict[str, Any], framed: bool, status: str, message: str
) -> None:
    # As the worker's undeliverable results: the DLQ reader gets the answer and its reason,
    # keyed by request id; the source headers name the request's record.
    publisher = FailingPublisher(("team-replies",))
    ingest = service(tmp_path, publisher)
    value = json.dumps({**EVENT, **changes, "reply_to": "team-replies"}).encode()
    await ingest.handle([record(join_frame(value) if framed else value)])

    [dead] = publisher.sent
    assert dead.topic == DLQ
    assert dead.key == b"r-undeliverable"
    assert is_frame(dead.value) == framed, "the answer as it would have gone"
    result = InferenceResult.from_wire(dead.value)
    assert (result.request_id, result.status) == ("r-undeliverable", status)
    assert result.error is not None and message in result.error.message
    assert h.header(dead.headers, h.ERROR_CODE) == "undeliverable"
    assert "team-replies" in (h.header(dead.headers, h.ERROR_MESSAGE) or "")
    where = [
        h.header(dead.headers, n) for n in (h.SOURCE_TOPIC, h.SOURCE_PARTITION, h.SOURCE_OFFSET)
    ]
    assert where == [INGEST, "0", "7"]
    assert ingest.offsets.in_flight(INGEST, 0) == 0
    assert ingest.counts["dead_lettered"] == 1


async def test_a_dlq_that_cannot_be_written_is_retried_until_it_takes_the_record(
    tmp_path: Path,
) -> None:
    # Route, answer and the first two DLQ writes fail (a broker coming back): the record
    # still ends in the DLQ, and only then counts as answered.
    publisher = FailingPublisher(("inferbus.req.", RESULTS, DLQ), times=4)
    ingest = service(tmp_path, publisher)
    await ingest.handle([record(json.dumps(EVENT).encode())])
    [dead] = publisher.sent
    assert dead.topic == DLQ
    assert ingest.offsets.in_flight(INGEST, 0) == 0


async def test_an_unparseable_event_whose_dlq_write_failed_keeps_its_code_and_reason(
    tmp_path: Path,
) -> None:
    publisher = FailingPublisher((DLQ,), times=1)
    ingest = service(tmp_path, publisher)
    await ingest.handle([record(b"{not json")])
    [dead] = publisher.sent
    assert dead.topic == DLQ
    assert dead.value == b"{not json"
    assert h.header(dead.headers, h.ERROR_CODE) == "unparseable"
    assert "not JSON" in (h.header(dead.headers, h.ERROR_MESSAGE) or "")
    assert ingest.offsets.in_flight(INGEST, 0) == 0


# ---- ingest's own defects: answered or dead-lettered, never left for a restart --------------


class RaisingPublisher(FailingPublisher):
    """Raises out of `send_all` for its first `raises` calls (a defect, not a failed send)."""

    def __init__(self, raises: int) -> None:
        super().__init__(())
        self.raises = raises

    async def send_all(self, records: Sequence[Outgoing]) -> list[Any]:
        if self.raises > 0:
            self.raises -= 1
            raise RuntimeError("publisher defect")
        return await super().send_all(records)


def raise_on(marker: bytes, real: Any) -> Any:
    def handle_event(value: bytes | None, **kwargs: Any) -> Any:
        if value is not None and marker in value:
            raise ZeroDivisionError("handler defect")
        return real(value, **kwargs)

    return handle_event


def records_at(*values: bytes) -> list[ConsumerRecord[bytes, bytes]]:
    return [
        ConsumerRecord(INGEST, 0, offset, 0, 0, None, value, None, len(value), 0, ())
        for offset, value in enumerate(values)
    ]


@pytest.mark.parametrize(
    ("poisoned", "topic", "code"),
    [
        pytest.param(
            json.dumps({**EVENT, "request_id": "r-boom"}).encode(),
            RESULTS,
            None,
            id="names-a-request: answered internal_error",
        ),
        pytest.param(b"not json boom", DLQ, "internal_error", id="names-none: dead-lettered"),
    ],
)
async def test_an_event_whose_handling_raises_is_answered_and_the_poll_goes_on(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    poisoned: bytes,
    topic: str,
    code: str | None,
) -> None:
    import services.ingest.app as app

    monkeypatch.setattr(app, "handle_event", raise_on(b"boom", app.handle_event))
    publisher = FailingPublisher(())
    ingest = service(tmp_path, publisher)
    good = json.dumps(EVENT).encode()
    await ingest.handle(records_at(good, poisoned, good))

    sent = {(o.topic, o.value) for o in publisher.sent}
    assert sum(o.topic.startswith("inferbus.req.") for o in publisher.sent) == 2, sent
    [failed] = [o for o in publisher.sent if o.topic == topic]
    if code is None:
        result = json.loads(failed.value)
        assert result["request_id"] == "r-boom"
        assert result["status"] == "internal_error"
        assert "ZeroDivisionError: handler defect" in result["error"]["message"]
    else:
        assert failed.value == poisoned, "the producer's original bytes"
        assert h.header(failed.headers, h.ERROR_CODE) == code
        assert "handler defect" in (h.header(failed.headers, h.ERROR_MESSAGE) or "")
    assert ingest.offsets.in_flight(INGEST, 0) == 0, "every record counts as answered"


async def test_a_poll_whose_delivery_raises_is_dead_lettered_whole(tmp_path: Path) -> None:
    publisher = RaisingPublisher(raises=1)
    ingest = service(tmp_path, publisher)
    values = [json.dumps({**EVENT, "request_id": f"r-{i}"}).encode() for i in range(3)]
    await ingest.handle(records_at(*values))

    assert [o.topic for o in publisher.sent] == [DLQ] * 3
    assert [o.value for o in publisher.sent] == values
    for dead in publisher.sent:
        assert h.header(dead.headers, h.ERROR_CODE) == "internal_error"
        assert "RuntimeError: publisher defect" in (h.header(dead.headers, h.ERROR_MESSAGE) or "")
    assert ingest.depths.depth("inferbus.req.demo-mlp.interactive") in (None, 0), "released"
    assert ingest.offsets.in_flight(INGEST, 0) == 0
    assert ingest.counts["dead_lettered"] == 3


async def test_when_even_the_dlq_path_raises_the_poll_stays_uncommitted(tmp_path: Path) -> None:
    ingest = service(tmp_path, RaisingPublisher(raises=2))
    with pytest.raises(RuntimeError, match="publisher defect"):
        await ingest.handle(records_at(json.dumps(EVENT).encode()))
    assert ingest.offsets.in_flight(INGEST, 0) == 1, "not committed past: redelivered"

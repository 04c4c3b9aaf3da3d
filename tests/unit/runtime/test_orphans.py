"""orphan_answer: a record no worker will read gets an error result on its reply topic, in
its own form and trace; one that names no request goes to the DLQ, saying why."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import orjson
import pytest
from aiokafka.structs import TopicPartition

from infra.lenient_fetch import UNREADABLE_HEADER
from schemas import headers as h
from schemas.frames import join_frame
from schemas.result import InferenceResult
from schemas.topics import DLQ, RESULTS
from services.runtime import orphans
from services.runtime.orphans import SweepCounts, SweepStalled, orphan_answer
from tests.unit.worker.test_inhand import TOPIC, TS_MS, record

WHY = "model 'gone' is no longer in the repository"
TRACE = b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def event(**changes: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "request_id": "r-1",
        "model": "gone",
        "inputs": {"x": {"dtype": "float32", "shape": [1, 2], "data": [[0.5, 0.5]]}},
        "reply_to": "team-a.results",
        "tenant": "team-a",
    }
    raw.update(changes)
    return {k: v for k, v in raw.items() if v is not ...}


JSON_EVENT = json.dumps(event()).encode()
FRAME_EVENT = join_frame(
    json.dumps(
        event(
            inputs={"x": {"dtype": "float32", "shape": [1, 2], "raw": {"offset": 0, "nbytes": 8}}}
        )
    ).encode(),
    [b"\x00" * 8],
)


@pytest.mark.parametrize(
    ("value", "reply_to", "form"),
    [
        pytest.param(JSON_EVENT, "team-a.results", "json", id="json"),
        pytest.param(FRAME_EVENT, "team-a.results", "frame", id="binary-frame"),
        pytest.param(json.dumps(event(reply_to=...)).encode(), RESULTS, "json", id="no-reply-to"),
        pytest.param(
            json.dumps(event(inputs="not tensors")).encode(),
            "team-a.results",
            "json",
            id="breaks-the-schema-but-names-its-id",
        ),
    ],
)
def test_a_request_gets_an_error_result_on_its_reply_topic(
    value: bytes, reply_to: str, form: str
) -> None:
    headers = [
        (h.PRODUCED_AT, str(TS_MS - 250).encode()),
        (h.TRACEPARENT, TRACE),
        (h.TRACESTATE, b"k=v"),
        (h.INGEST_MS, b"0.5"),
    ]
    out = orphan_answer(
        record(value, headers=headers), status="model_not_found", why=WHY, now_ms=TS_MS + 1000
    )

    assert (out.topic, out.key) == (reply_to, b"r-1")
    content_type = h.header(out.headers, h.CONTENT_TYPE)
    assert (content_type == "application/json") is (form == "json")
    assert h.header(out.headers, h.TRACEPARENT) == TRACE.decode(), "the request's own trace"
    assert h.header(out.headers, h.TRACESTATE) == "k=v"
    assert h.header(out.headers, h.INGEST_MS) is None, "a request header is not a result's"
    result = InferenceResult.from_wire(out.value)
    assert (result.request_id, result.model, result.tenant) == ("r-1", "gone", "team-a")
    assert result.status == "model_not_found" and result.error is not None
    assert result.error.code == "model_not_found"
    assert result.error.message.startswith(WHY + ": no worker is left to serve " + TOPIC)
    assert result.timings.queue_ms == 1000
    assert result.timings.e2e_ms == 1250, "from when it reached inferbus"
    assert result.outputs == {}


@pytest.mark.parametrize(
    ("value", "headers", "says"),
    [
        pytest.param(
            json.dumps(event(request_id=...)).encode(), (), "names no request", id="no-id"
        ),
        pytest.param(b"\xff\xfe garbage", (), "names no request", id="not-json"),
        pytest.param(None, (), "names no request", id="tombstone"),
        pytest.param(
            None,
            [(UNREADABLE_HEADER, b"a batch failed its checksum")],
            "unreadable: a batch failed its checksum",
            id="unreadable-mark",
        ),
    ],
)
def test_a_record_that_names_no_request_goes_to_the_dlq_saying_why(
    value: bytes | None, headers: Sequence[tuple[str, bytes]], says: str
) -> None:
    out = orphan_answer(
        record(value, headers=headers), status="model_not_found", why=WHY, now_ms=TS_MS
    )

    assert out.topic == DLQ
    assert out.key == b"r-1" and out.value == (value or b"")
    assert h.header(out.headers, h.ERROR_CODE) == "unparseable"
    message = h.header(out.headers, h.ERROR_MESSAGE) or ""
    assert message.startswith(WHY + "; ") and says in message
    assert (h.header(out.headers, h.SOURCE_TOPIC), h.header(out.headers, h.SOURCE_OFFSET)) == (
        TOPIC,
        "42",
    )


def test_the_tier_s_status_is_what_the_caller_names() -> None:
    out = orphan_answer(
        record(JSON_EVENT),
        status="invalid_input",
        why="model 'gone' no longer serves tier 'interactive'",
        now_ms=TS_MS,
    )
    assert orjson.loads(out.value)["error"]["code"] == "invalid_input"


def test_counts_add() -> None:
    total = SweepCounts(3, 1) + SweepCounts(2, 0)
    assert (total.answered, total.dead_lettered, total.total) == (5, 1, 6)


class Silent:
    """A consumer whose fetches never bring anything (the topic was deleted under it)."""

    def __init__(self) -> None:
        self.stopped = False
        self.commits: list[Any] = []

    def assign(self, tps: Any) -> None:
        pass

    def seek(self, tp: Any, offset: int) -> None:
        pass

    async def getmany(self, *tps: Any, **kw: Any) -> dict[Any, Any]:
        await asyncio.sleep(0.01)
        return {}

    async def position(self, tp: Any) -> int:
        return 0

    async def commit(self, offsets: Any) -> None:
        self.commits.append(offsets)

    async def stop(self) -> None:
        self.stopped = True


async def test_a_sweep_that_reads_nothing_before_the_end_fails_said(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    consumer = Silent()
    tp = TopicPartition(TOPIC, 3)

    async def group_consumer(*args: Any) -> Silent:
        return consumer

    async def spans(*args: Any) -> dict[Any, tuple[int, int]]:
        return {tp: (0, 5)}

    monkeypatch.setattr(orphans, "_group_consumer", group_consumer)
    monkeypatch.setattr(orphans, "_spans_to_answer", spans)
    monkeypatch.setattr(orphans, "STALL_S", 0.05)
    with pytest.raises(SweepStalled, match=r"nothing read from .* partitions \[3\]"):
        await orphans.answer_orphans(
            "127.0.0.1:1",
            object(),  # type: ignore[arg-type]
            group="g",
            topic=TOPIC,
            status="model_not_found",
            why=WHY,
        )
    assert consumer.stopped and consumer.commits == [], "nothing answered, nothing committed"

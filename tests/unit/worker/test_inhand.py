"""decode_record: a record becomes an InHand with arrays, or with its own error; only a record
with no request id to answer raises Unparseable."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from aiokafka.structs import ConsumerRecord

from infra.lenient_fetch import UNREADABLE_HEADER
from schemas import headers as h
from schemas.errors import InvalidInput, ModelNotFound, Unparseable
from schemas.topics import RESULTS
from services.models.demo import encoder_config, mlp_config
from services.worker.inhand import decode_record

TOPIC = "inferbus.req.demo-mlp.interactive"
TS_MS = 1_735_732_800_000  # 2025-01-01T12:00:00Z
MLP = mlp_config()
ENCODER = encoder_config()


def record(
    value: bytes | None,
    *,
    headers: Sequence[tuple[str, bytes]] = (),
    offset: int = 42,
    timestamp: int = TS_MS,
) -> ConsumerRecord[bytes, bytes]:
    return ConsumerRecord(
        topic=TOPIC,
        partition=3,
        offset=offset,
        timestamp=timestamp,
        timestamp_type=0,
        key=b"r-1",
        value=value,
        checksum=None,
        serialized_key_size=3,
        serialized_value_size=len(value or b""),
        headers=list(headers),
    )


def event(**changes: Any) -> bytes:
    raw: dict[str, Any] = {
        "request_id": "r-1",
        "model": "demo-mlp",
        "inputs": {"x": {"dtype": "float32", "shape": [2, 16], "data": [[0.25] * 16] * 2}},
        "reply_to": "team-a.results",
        "tenant": "team-a",
    }
    for key, value in changes.items():
        if value is ...:
            raw.pop(key, None)
        else:
            raw[key] = value
    return json.dumps(raw).encode()


def decode(value: bytes | None, *, config: Any = MLP, tokenize: Any = None, **kw: Any) -> Any:
    return decode_record(
        record(value, **kw), tier="interactive", config=config, tokenize=tokenize, max_samples=8
    )


def test_valid_record_is_decoded() -> None:
    headers = [(h.PRODUCED_AT, b"1735732799000"), (h.INGEST_MS, b"0.75"), ("traceparent", b"00-x")]

    item = decode(event(), headers=headers)

    assert item.error is None
    assert (item.topic, item.partition, item.offset, item.tier) == (TOPIC, 3, 42, "interactive")
    assert (item.request_id, item.reply_to, item.model, item.tenant) == (
        "r-1",
        "team-a.results",
        "demo-mlp",
        "team-a",
    )
    assert item.arrays is not None
    assert item.arrays["x"].shape == (2, 16)
    assert item.arrays["x"].dtype == np.float32
    assert item.samples == 2
    assert item.length is None
    assert item.produced_ms == 1_735_732_799_000
    assert item.ingest_ms == 0.75
    assert item.record_ts_ms == TS_MS
    assert item.headers == headers
    assert item.deadline_s is None
    assert not item.expired
    assert item.preprocess_ms >= 0


def test_sequence_length_comes_from_the_sequence_input() -> None:
    inputs = {
        name: {"dtype": "int64", "shape": [1, 37], "data": [[1] * 37]}
        for name in ("input_ids", "attention_mask")
    }

    item = decode(event(model="demo-encoder", inputs=inputs), config=ENCODER)

    assert item.error is None
    assert item.length == 37


@pytest.mark.parametrize(
    ("changes", "headers", "deadline_s"),
    [
        pytest.param({}, [], None, id="none"),
        pytest.param(
            {"timeout_ms": 1}, [(h.DEADLINE, b"1735732805000")], 1_735_732_805.0, id="header-wins"
        ),
        pytest.param({"timeout_ms": 2500}, [], TS_MS / 1000 + 2.5, id="timeout-from-record-time"),
        pytest.param(
            {"timeout_ms": 2500, "created_at": "2025-01-01T11:59:59Z"},
            [],
            TS_MS / 1000 - 1 + 2.5,
            id="timeout-from-created",
        ),
        pytest.param(
            {"deadline": "2025-01-01T12:00:09Z"},
            [(h.DEADLINE, b"junk")],
            TS_MS / 1000 + 9,
            id="junk-header",
        ),
    ],
)
def test_deadline(
    changes: dict[str, Any], headers: list[tuple[str, bytes]], deadline_s: float | None
) -> None:
    item = decode(event(**changes), headers=headers)

    if deadline_s is None:
        assert item.deadline_s is None
    else:
        assert item.deadline_s == pytest.approx(deadline_s)


@pytest.mark.parametrize(
    ("deadline_ms", "expired"),
    [
        pytest.param(int((time.time() - 60) * 1000), True, id="passed"),
        pytest.param(int((time.time() + 600) * 1000), False, id="ahead"),
    ],
)
def test_expired(deadline_ms: int, expired: bool) -> None:
    item = decode(event(), headers=[(h.DEADLINE, str(deadline_ms).encode())])

    assert item.expired is expired


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(None, id="tombstone"),
        pytest.param(b"", id="empty"),
        pytest.param(b"{not json", id="malformed"),
        pytest.param(b"\xff\xfe", id="not-utf8"),
        pytest.param(b"[1, 2]", id="array"),
        pytest.param(event(request_id=...), id="no-request-id"),
        pytest.param(event(request_id=""), id="empty-request-id"),
        pytest.param(event(request_id=7), id="request-id-not-a-string"),
        # Regressions: these raised out of decode_record and killed the tier's poll loop.
        pytest.param(b"[" * 50_000 + b"]" * 50_000, id="nested-too-deep"),
        pytest.param(b'{"request_id": ' + b"1" * 5000 + b"}", id="int-over-digit-limit"),
    ],
)
def test_records_with_no_request_id_raise_unparseable(value: bytes | None) -> None:
    with pytest.raises(Unparseable):
        decode(value)


def test_an_unreadable_mark_is_dead_lettered_with_what_was_lost() -> None:
    lost = b"records 40-42 of inferbus.req.demo-mlp.interactive[3] cannot be read: checksum"

    with pytest.raises(Unparseable, match=r"records 40-42 of .* cannot be read"):
        decode(None, headers=[(UNREADABLE_HEADER, lost)])


@pytest.mark.parametrize(
    ("value", "message", "reply_to"),
    [
        pytest.param(event(model=...), "model", "team-a.results", id="missing-model"),
        pytest.param(event(tier="gold"), "tier", "team-a.results", id="bad-tier"),
        pytest.param(event(reply_to="bad topic"), "reply_to", RESULTS, id="illegal-reply-to"),
        pytest.param(
            event(inputs={"x": {"dtype": "float32", "shape": [1, 16]}}),
            "exactly one of",
            "team-a.results",
            id="no-payload",
        ),
        pytest.param(
            event(model="demo-encoder"),
            "request for model 'demo-encoder' reached a worker of 'demo-mlp'",
            "team-a.results",
            id="wrong-model",
        ),
        pytest.param(
            event(inputs={"x": {"dtype": "int64", "shape": [1, 16], "data": [[1] * 16]}}),
            "must be float32, got int64",
            "team-a.results",
            id="wrong-dtype-skipped-ingest",
        ),
        pytest.param(
            event(inputs={"x": {"dtype": "float32", "shape": [1, 8], "data": [[1] * 8]}}),
            "has shape [1, 8]",
            "team-a.results",
            id="wrong-shape-skipped-ingest",
        ),
        pytest.param(
            event(inputs={"x": {"dtype": "float32", "shape": [9, 16], "data": [[1] * 16] * 9}}),
            "9 samples; the limit is 8",
            "team-a.results",
            id="too-many-samples",
        ),
        pytest.param(
            event(inputs={"x": {"dtype": "float32", "shape": [1, 16], "data": [[None] * 16]}}),
            "NaN or infinity",
            "team-a.results",
            id="null-is-nan",
        ),
        pytest.param(
            event(inputs={"x": {"text": "hello"}}),
            "has no tokenizer",
            "team-a.results",
            id="text-without-tokenizer",
        ),
        pytest.param(
            b'{"request_id": "r-1", "model": "demo-mlp", "inputs": {"x": {"data": '
            + b"[" * 300
            + b"]" * 300
            + b"}}}",
            "recursion limit",
            RESULTS,
            id="nested-data",
        ),
    ],
)
def test_bad_requests_carry_their_own_error(value: bytes, message: str, reply_to: str) -> None:
    item = decode(value)

    assert item.request_id == "r-1"
    assert item.reply_to == reply_to
    assert isinstance(item.error, InvalidInput)
    assert message in str(item.error)
    assert item.arrays is None


def test_text_is_tokenized_by_the_worker() -> None:
    seen: list[list[str]] = []

    def tokenize(texts: list[str]) -> dict[str, np.ndarray[Any, Any]]:
        seen.append(texts)
        ids = np.ones((len(texts), 5), dtype=np.int64)
        return {"input_ids": ids, "attention_mask": ids}

    item = decode(
        event(model="demo-encoder", inputs={"text": {"text": ["a b", "c"]}}),
        config=ENCODER,
        tokenize=tokenize,
    )

    assert item.error is None
    assert seen == [["a b", "c"]]
    assert item.samples == 2
    assert item.length == 5


def test_text_without_a_tokenizer_in_hand_is_an_error() -> None:
    item = decode(event(model="demo-encoder", inputs={"text": {"text": "hi"}}), config=ENCODER)

    assert isinstance(item.error, InvalidInput)
    assert "cannot tokenize text here" in str(item.error)


@pytest.mark.parametrize(
    "error",
    [
        pytest.param(InvalidInput("tokenization failed: boom"), id="invalid-input"),
        # Regression: any other exception escaped decode_record and killed the poll loop.
        pytest.param(RuntimeError("tokenization failed: rust panic"), id="tokenizer-bug"),
    ],
)
def test_tokenization_failure_is_the_requests_error(error: Exception) -> None:
    def tokenize(texts: list[str]) -> dict[str, np.ndarray[Any, Any]]:
        raise error

    item = decode(
        event(model="demo-encoder", inputs={"text": {"text": "hi"}}),
        config=ENCODER,
        tokenize=tokenize,
    )

    assert isinstance(item.error, InvalidInput)
    assert "tokenization failed" in str(item.error)


@pytest.mark.parametrize(
    ("asked", "served", "answered"),
    [
        pytest.param(..., "1", None, id="none-named"),
        pytest.param("1", "1", None, id="the-served-one"),
        pytest.param("2", "1", "version '2' is not served", id="another-version"),
        pytest.param("2", None, None, id="worker-without-a-version"),
    ],
)
def test_a_named_version_is_served_or_answered_model_not_found(
    asked: Any, served: str | None, answered: str | None
) -> None:
    """A request for version 2 was answered ok by a worker of version 1."""
    item = decode_record(
        record(event(model_version=asked)),
        tier="interactive",
        config=MLP,
        tokenize=None,
        max_samples=8,
        served_version=served,
    )
    if answered is None:
        assert item.error is None
    else:
        assert isinstance(item.error, ModelNotFound)
        assert answered in str(item.error)
        assert "they serve version '1'" in str(item.error)

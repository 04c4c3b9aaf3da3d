"""Request and result events, topic names, headers and the error hierarchy."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from schemas import headers as h
from schemas.errors import (
    DeadlineExceeded,
    EngineError,
    InferbusError,
    InvalidInput,
    ModelNotFound,
    Overloaded,
    Unauthorized,
    Unparseable,
)
from schemas.request import InferenceRequest
from schemas.result import STATUSES, InferenceResult, error_result
from schemas.topics import (
    TIERS,
    is_legal_model_name,
    is_legal_topic,
    parse_request_topic,
    parse_worker_group,
    request_topic,
    worker_group,
)

X = {"x": {"dtype": "float32", "shape": [1, 1], "data": [[1.0]]}}
T0 = datetime(2025, 1, 1, tzinfo=UTC)


def request(**fields: Any) -> InferenceRequest:
    return InferenceRequest.model_validate(
        {"request_id": "r-1", "model": "m", "inputs": X, **fields}
    )


# ---- request -------------------------------------------------------------------------------


def test_defaults() -> None:
    req = request()

    assert (req.schema_version, req.tier, req.reply_to) == (1, "interactive", "inferbus.results")
    assert req.deadline is None
    assert req.metadata == {}


@pytest.mark.parametrize(
    "request_id",
    [
        pytest.param("", id="empty"),
        pytest.param("r" * 129, id="too-long"),
        pytest.param("has space", id="space"),
        pytest.param("naïve", id="non-ascii"),
    ],
)
def test_request_id_constraints(request_id: str) -> None:
    with pytest.raises(ValidationError, match="request_id"):
        request(request_id=request_id)


@pytest.mark.parametrize(
    "request_id", ["r-1", "A.b_c:d@e/f-9", "r" * 128, "0f8fad5b-d9cb-469f-a165-70867728950e"]
)
def test_request_ids_accepted(request_id: str) -> None:
    assert request(request_id=request_id).request_id == request_id


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        pytest.param({}, None, id="none"),
        pytest.param(
            {"timeout_ms": 1500}, T0 + timedelta(milliseconds=1500), id="timeout-from-receipt"
        ),
        pytest.param(
            {"timeout_ms": 1500, "created_at": "2024-12-31T23:59:59Z"},
            T0 + timedelta(milliseconds=500),
            id="timeout-from-creation",
        ),
        pytest.param(
            {"deadline": "2025-01-01T00:00:09Z", "timeout_ms": 1},
            T0 + timedelta(seconds=9),
            id="deadline-wins",
        ),
        pytest.param(
            {"deadline": "2025-01-01T00:00:09"}, T0 + timedelta(seconds=9), id="naive-is-utc"
        ),
        pytest.param(
            {"deadline": "2025-01-01T02:00:09+02:00"}, T0 + timedelta(seconds=9), id="zoned"
        ),
    ],
)
def test_effective_deadline(fields: dict[str, Any], expected: datetime | None) -> None:
    assert request(**fields).effective_deadline(T0) == expected


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        pytest.param("timeout_ms", '"5000"', "valid integer", id="timeout-string"),
        pytest.param("timeout_ms", "5000.0", "valid integer", id="timeout-float"),
        pytest.param("timeout_ms", "true", "valid integer", id="timeout-bool"),
        pytest.param("deadline", "0", "not a number", id="deadline-number"),
        pytest.param("deadline", '"0"', "not a number", id="deadline-quoted-number"),
        pytest.param("created_at", "1733440000000", "not a number", id="created-at-epoch-ms"),
        pytest.param("created_at", '"1.7e12"', "not a number", id="created-at-quoted"),
        pytest.param("deadline", '"2026-12-06"', "not a date", id="deadline-date-only"),
        pytest.param("created_at", '"2026-12-06"', "not a date", id="created-at-date-only"),
        pytest.param("schema_version", "true", "integer 1", id="schema-version-bool"),
        pytest.param("schema_version", "1.0", "integer 1", id="schema-version-float"),
        pytest.param("schema_version", "null", r"1 \(or left out", id="schema-version-null"),
        pytest.param("schema_version", '"1"', r"1 \(or left out", id="schema-version-str"),
        pytest.param("deadline", '"tomorrow"', "such as 2026-12-06T12:00:00Z", id="deadline-word"),
        pytest.param("created_at", '"now"', "such as 2026-12-06T12:00:00Z", id="created-at-word"),
    ],
)
def test_what_the_json_schema_forbids_is_refused(field: str, value: str, words: str) -> None:
    """Lax parsing took these: a quoted or fractional timeout, a number as a time, a date
    as its midnight."""
    text = '{"x": {"text": "a"}}'
    event = f'{{"request_id": "r", "model": "m", "inputs": {text}, "{field}": {value}}}'
    with pytest.raises(ValidationError, match=words):
        InferenceRequest.model_validate_json(event)


@pytest.mark.parametrize(
    "shape", ['["1", 16]', "[1.0, 16]", "[true, 16]"], ids=["string", "float", "bool"]
)
def test_a_shape_holds_integers(shape: str) -> None:
    tensor = f'{{"dtype": "float32", "shape": {shape}, "b64": ""}}'
    event = f'{{"request_id": "r", "model": "m", "inputs": {{"x": {tensor}}}}}'
    with pytest.raises(ValidationError, match="valid integer"):
        InferenceRequest.model_validate_json(event)


@pytest.mark.parametrize("reply_to", ["bad topic", "..", "", "t" * 250, "a/b", "ä"])
def test_illegal_reply_to_is_refused_with_its_name(reply_to: str) -> None:
    with pytest.raises(ValidationError, match="is not a legal Kafka topic name"):
        request(reply_to=reply_to)


def test_request_is_frozen_and_ignores_unknown_fields() -> None:
    req = request(future_field=1)

    assert not hasattr(req, "future_field")
    with pytest.raises(ValidationError):
        req.tier = "batch"  # type: ignore[misc]


# ---- result --------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [s for s in STATUSES if s != "ok"])
def test_error_result_names_its_status(status: Any) -> None:
    result = error_result("r-1", "m", status, "why", tenant="t")

    assert not result.ok
    assert result.error is not None
    assert (result.error.code, result.error.message) == (status, "why")
    assert result.tenant == "t"
    assert InferenceResult.model_validate_json(result.model_dump_json()) == result


def test_unknown_status_is_refused() -> None:
    with pytest.raises(ValidationError, match="status"):
        InferenceResult(request_id="r", model="m", status="meh")  # type: ignore[arg-type]


# ---- topics --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "legal"),
    [
        pytest.param("inferbus.results", True, id="dotted"),
        pytest.param("A-b_c.9", True, id="all-classes"),
        pytest.param("t" * 249, True, id="max-length"),
        pytest.param("t" * 250, False, id="too-long"),
        pytest.param("", False, id="empty"),
        pytest.param(".", False, id="dot"),
        pytest.param("..", False, id="dot-dot"),
        pytest.param("...", True, id="three-dots"),
        pytest.param("a b", False, id="space"),
        pytest.param("a/b", False, id="slash"),
        pytest.param("a\n", False, id="newline"),
    ],
)
def test_is_legal_topic(name: str, legal: bool) -> None:
    assert is_legal_topic(name) is legal


@pytest.mark.parametrize(
    ("name", "legal"),
    [
        pytest.param("demo-mlp", True, id="demo"),
        pytest.param("m_1", True, id="underscore"),
        pytest.param("m" * 63, True, id="max"),
        pytest.param("m" * 64, False, id="too-long"),
        pytest.param("-m", False, id="leading-dash"),
        pytest.param("Demo", False, id="upper"),
        pytest.param("a.b", False, id="dot-breaks-topic-parsing"),
        pytest.param("a/b", False, id="slash"),
        pytest.param("", False, id="empty"),
    ],
)
def test_is_legal_model_name(name: str, legal: bool) -> None:
    assert is_legal_model_name(name) is legal


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize(("lane", "infix"), [("stable", ""), ("canary", "canary.")])
def test_request_topic_round_trips(tier: Any, lane: Any, infix: str) -> None:
    topic = request_topic("demo-mlp", tier, lane)
    group = worker_group("demo-mlp", tier, lane)

    assert topic == f"inferbus.req.demo-mlp.{infix}{tier}"
    assert group == f"inferbus.workers.demo-mlp.{infix}{tier}"
    assert is_legal_topic(topic) and is_legal_topic(group)
    assert parse_request_topic(topic) == ("demo-mlp", tier, lane)
    assert parse_worker_group(group) == ("demo-mlp", tier, lane)


def test_lane_names_never_collide_with_another_models_names() -> None:
    """A model cannot be called `m.canary`: every (model, tier, lane) has its own names."""
    assert not is_legal_model_name("m.canary")
    names = {
        (request_topic(model, tier, lane), worker_group(model, tier, lane))
        for model in ("m", "canary", "m-canary")
        for tier in TIERS
        for lane in ("stable", "canary")
    }
    assert len({topic for topic, _ in names}) == len({group for _, group in names}) == 18


@pytest.mark.parametrize(
    "topic",
    [
        "inferbus.results",
        "inferbus.req.m.gold",
        "inferbus.req.a.b.batch",
        "other.req.m.batch",
        "inferbus.req.m.canary.gold",
        "inferbus.req.M.batch",
        "inferbus.req.m.canary.x.batch",
    ],
)
def test_parse_request_topic_refuses_other_topics(topic: str) -> None:
    assert parse_request_topic(topic) is None
    assert parse_worker_group(topic.replace(".req.", ".workers.")) is None


# ---- headers -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "text", "number"),
    [
        pytest.param(None, None, None, id="none"),
        pytest.param([], None, None, id="empty"),
        pytest.param([(h.DEADLINE, b"1700000000000")], "1700000000000", 1.7e12, id="number"),
        pytest.param([(h.DEADLINE, b"soon")], "soon", None, id="not-a-number"),
        pytest.param([(h.DEADLINE, b"1"), (h.DEADLINE, b"2")], "2", 2.0, id="last-wins"),
        pytest.param([(h.DEADLINE, b"\xff")], "\ufffd", None, id="bad-utf8"),
        pytest.param([("other", b"1")], None, None, id="other-header"),
    ],
)
def test_header_reading(
    headers: list[tuple[str, bytes]] | None, text: str | None, number: float | None
) -> None:
    assert h.header(headers, h.DEADLINE) == text
    assert h.header_float(headers, h.DEADLINE) == number


def test_encode_headers() -> None:
    assert h.encode([("a", b"raw"), ("b", "text"), ("c", 3), ("d", 1.5)]) == [
        ("a", b"raw"),
        ("b", b"text"),
        ("c", b"3"),
        ("d", b"1.5"),
    ]


# ---- errors --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "status"),
    [
        pytest.param(InvalidInput, "invalid_input", id="invalid"),
        pytest.param(ModelNotFound, "model_not_found", id="not-found"),
        pytest.param(Unauthorized, "unauthorized", id="unauthorized"),
        pytest.param(DeadlineExceeded, "deadline_exceeded", id="deadline"),
        pytest.param(Overloaded, "rejected_overload", id="overload"),
        pytest.param(EngineError, "internal_error", id="engine"),
        pytest.param(Unparseable, "internal_error", id="unparseable"),
    ],
)
def test_every_error_maps_to_a_status(error: type[InferbusError], status: str) -> None:
    assert issubclass(error, InferbusError)
    assert error.status == status
    assert error.status in STATUSES


def test_error_text_carries_sorted_context() -> None:
    error = Overloaded("queue full", tier="batch", lag=12, bound=10)

    assert str(error) == "queue full (bound=10 lag=12 tier=batch)"
    assert error.message == "queue full"
    assert str(InvalidInput("plain")) == "plain"

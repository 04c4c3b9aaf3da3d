"""handle_event: every bad input gets its named status (or the DLQ); a good one is routed as is."""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from infra.models.repository import ModelRepository
from schemas import headers as h
from schemas.errors import (
    MESSAGE_MAX_CHARS,
    DeadlineExceeded,
    InvalidInput,
    ModelNotFound,
    Overloaded,
    Unauthorized,
    Unparseable,
)
from schemas.frames import join_frame
from schemas.topics import RESULTS, TIERS, Tier
from services.ingest.catalog import CachedModelCatalog, QueueDepths, served
from services.ingest.handlers import (
    Answer,
    DeadLetter,
    Route,
    dead_letter_headers,
    handle_event,
)
from services.ingest.settings import IngestSettings
from services.models.demo import write_demo_models
from tests.unit.ingest.conftest import (
    NOW,
    PRODUCED_AT,
    FakeCatalog,
    encode,
    mlp_event,
    with_changes,
)

MLP_TOPIC = "inferbus.req.demo-mlp.interactive"


def run(value: bytes | None, catalog: FakeCatalog, settings: IngestSettings) -> Any:
    return handle_event(value, produced_at=PRODUCED_AT, catalog=catalog, settings=settings, now=NOW)


def x_tensor(**changes: Any) -> dict[str, Any]:
    tensor: dict[str, Any] = {"dtype": "float32", "shape": [1, 16], "data": [[0.5] * 16]}
    for key, value in changes.items():
        if value is ...:
            tensor.pop(key, None)
        else:
            tensor[key] = value
    return tensor


def b64(array: np.ndarray[Any, Any]) -> str:
    return base64.b64encode(array.tobytes()).decode()


def encoder_inputs(ids_shape: list[int], mask_shape: list[int] | None = None) -> dict[str, Any]:
    mask_shape = mask_shape or ids_shape
    return {
        "input_ids": {
            "dtype": "int64",
            "shape": ids_shape,
            "data": np.ones(ids_shape, int).tolist(),
        },
        "attention_mask": {
            "dtype": "int64",
            "shape": mask_shape,
            "data": np.ones(mask_shape, int).tolist(),
        },
    }


# ---- dead letters: no request id to answer -------------------------------------------------

DEAD_LETTERS = [
    pytest.param(None, "no value", id="tombstone"),
    pytest.param(b'{"request_id": "r-1", "model":', "not JSON", id="truncated-json"),
    pytest.param(b"\xff\xfe\x00garbage", "not UTF-8 text (byte 0xff at position 0)", id="not-utf8"),
    pytest.param(
        b'{"request_id": "caf\xe9"}', "not UTF-8 text (byte 0xe9 at position 19)", id="latin-1"
    ),
    pytest.param(b"IBF2\x00\x00\x00\x02{}", "unknown magic or version", id="frame-v2"),
    pytest.param(b"ibf1\x00\x00\x00\x02{}", "unknown magic or version", id="frame-lowercase"),
    pytest.param(b"", "not JSON", id="empty-bytes"),
    pytest.param(b"[1, 2, 3]", "a JSON array, not an object", id="json-array"),
    pytest.param(b'"r-1"', "a JSON string, not an object", id="json-string"),
    pytest.param(b"null", "a JSON null, not an object", id="json-null"),
    pytest.param(b"42", "a JSON number, not an object", id="json-number"),
    pytest.param(b"true", "a JSON boolean, not an object", id="json-boolean"),
    pytest.param(encode(mlp_event(request_id=...)), "request_id", id="no-request-id"),
    pytest.param(encode(mlp_event(request_id="")), "request_id", id="empty-request-id"),
    pytest.param(encode(mlp_event(request_id="r" * 129)), "request_id", id="request-id-too-long"),
    pytest.param(encode(mlp_event(request_id=17)), "request_id", id="request-id-not-a-string"),
    pytest.param(encode(mlp_event(request_id=None)), "request_id", id="request-id-null"),
    # Regressions: these raised out of handle_event and nacked the whole poll forever.
    pytest.param(b"[" * 50_000 + b"]" * 50_000, "not JSON", id="nested-too-deep"),
    pytest.param(b'{"request_id": ' + b"1" * 5000 + b"}", "not JSON", id="int-over-digit-limit"),
    pytest.param(
        b'{"request_id": "r-1", "inputs": {"x": {"data": ' + b"[" * 5000 + b"]" * 5000 + b"}}}",
        "not JSON",
        id="tensor-nested-too-deep",
    ),
]


@pytest.mark.parametrize(("value", "reason"), DEAD_LETTERS)
def test_unanswerable_events_are_dead_lettered_with_their_bytes(
    value: bytes | None, reason: str, catalog: FakeCatalog, settings: IngestSettings
) -> None:
    outcome = run(value, catalog, settings)

    assert isinstance(outcome, DeadLetter)
    assert outcome.value == (value or b"")
    assert isinstance(outcome.error, Unparseable)
    assert reason in str(outcome.error)


def test_dead_letter_headers_say_why_and_where_from() -> None:
    dead = DeadLetter(b"x", Unparseable("event is not JSON: " + "x" * 5000))

    headers = dict(dead_letter_headers(dead, topic="inferbus.ingest", partition=3, offset=41))

    assert headers[h.ERROR_CODE] == b"unparseable"
    assert headers[h.ERROR_MESSAGE].startswith(b"event is not JSON")
    assert len(headers[h.ERROR_MESSAGE].decode()) == 1000
    assert headers[h.ERROR_MESSAGE].endswith(b"(+5019 characters in all)")
    assert headers[h.SOURCE_TOPIC] == b"inferbus.ingest"
    assert headers[h.SOURCE_PARTITION] == b"3"
    assert headers[h.SOURCE_OFFSET] == b"41"


def test_a_dead_letter_keeps_the_producers_headers_but_not_a_forged_inferbus_one() -> None:
    """A replay tool needs the original content type and trace; a producer's own
    `inferbus-error` must not pass for the DLQ's."""
    dead = DeadLetter(b"x", Unparseable("event is not JSON"))
    original = [("content-type", b"application/json"), ("team", b"a"), (h.ERROR_CODE, b"ok")]

    headers = dead_letter_headers(dead, topic="t", partition=0, offset=1, original=original)

    assert headers[:2] == original[:2]
    assert [v for k, v in headers if k == h.ERROR_CODE] == [b"unparseable"]


# ---- answered with a named status ----------------------------------------------------------

ANSWERS = [
    # schema
    pytest.param(
        mlp_event(model=...), "invalid_input", "model: Field required", id="missing-model"
    ),
    pytest.param(
        mlp_event(inputs=...), "invalid_input", "inputs: Field required", id="missing-inputs"
    ),
    pytest.param(mlp_event(inputs={}), "invalid_input", "inputs", id="empty-inputs"),
    pytest.param(mlp_event(inputs=[1, 2]), "invalid_input", "inputs", id="inputs-not-a-mapping"),
    pytest.param(mlp_event(schema_version=2), "invalid_input", "schema_version", id="schema-v2"),
    pytest.param(
        mlp_event(request_id="has space"), "invalid_input", "request_id", id="request-id-pattern"
    ),
    pytest.param(mlp_event(timeout_ms=0), "invalid_input", "timeout_ms", id="timeout-zero"),
    pytest.param(
        mlp_event(deadline="tomorrow"), "invalid_input", "deadline", id="deadline-not-a-date"
    ),
    # model and version
    pytest.param(mlp_event(model="nope"), "model_not_found", "'nope'", id="unknown-model"),
    pytest.param(
        mlp_event(model_version="7"), "model_not_found", "no version '7'", id="unknown-version"
    ),
    # tier
    pytest.param(mlp_event(tier="gold"), "invalid_input", "tier", id="unknown-tier"),
    pytest.param(
        mlp_event(model="mlp-batch-only"),
        "invalid_input",
        "not served on tier 'interactive' (tiers: batch)",
        id="tier-not-served",
    ),
    # tenant
    pytest.param(
        mlp_event(model="mlp-team-a", tenant="team-b"),
        "unauthorized",
        "'team-b'",
        id="tenant-not-allowed",
    ),
    pytest.param(
        mlp_event(model="mlp-team-a", tenant=...),
        "unauthorized",
        "tenant None",
        id="tenant-missing",
    ),
    # dtype, shape, rank, size
    pytest.param(
        mlp_event(inputs={"x": x_tensor(dtype="complex64")}),
        "invalid_input",
        "dtype",
        id="unsupported-dtype",
    ),
    pytest.param(
        mlp_event(inputs={"x": x_tensor(dtype="int64", data=[[1] * 16])}),
        "invalid_input",
        "input 'x' must be float32, got int64",
        id="wrong-dtype",
    ),
    pytest.param(
        mlp_event(inputs={"x": x_tensor(shape=[1, 15], data=[[0.5] * 15])}),
        "invalid_input",
        "input 'x' has shape [1, 15]; the model takes [-1, 16]",
        id="wrong-shape",
    ),
    pytest.param(
        mlp_event(inputs={"x": x_tensor(shape=[16], data=[0.5] * 16)}),
        "invalid_input",
        "input 'x' has shape [16]",
        id="wrong-rank",
    ),
    pytest.param(
        mlp_event(inputs={"x": x_tensor(shape=[1, 16], data=[[0.5] * 15])}),
        "invalid_input",
        "`data` has shape [1, 15] but the tensor declares [1, 16]",
        id="data-disagrees-with-shape",
    ),
    pytest.param(
        mlp_event(inputs={"x": x_tensor(data=[["a"] * 16])}),
        "invalid_input",
        "`data` holds strings; the tensor is float32",
        id="data-not-numbers",
    ),
    pytest.param(
        mlp_event(inputs={"x": x_tensor(shape=[1, -16])}),
        "invalid_input",
        "negative",
        id="negative-dim",
    ),
    pytest.param(
        mlp_event(inputs={"x": x_tensor(shape=[0, 16], data=[])}),
        "invalid_input",
        "empty batch dimension",
        id="empty-batch-dimension",
    ),
    pytest.param(
        mlp_event(inputs={"x": x_tensor(shape=[128, 16], data=[[0.5] * 16] * 128)}),
        "invalid_input",
        "input 'x' is 8192 bytes; the limit is 4096 (INFERBUS_INGEST_MAX_TENSOR_BYTES)",
        id="oversized-tensor",
    ),
    pytest.param(
        mlp_event(inputs={"x": x_tensor(shape=[10**12, 16])}),
        "invalid_input",
        "the limit is 4096",
        id="oversized-tensor-declared-not-sent",
    ),
    pytest.param(
        mlp_event(inputs={"x": x_tensor(shape=[9, 16], data=[[0.5] * 16] * 9)}),
        "invalid_input",
        "request holds 9 samples; the limit is 8 (INFERBUS_INGEST_MAX_SAMPLES_PER_REQUEST)",
        id="too-many-samples",
    ),
    pytest.param(
        mlp_event(inputs={"x": x_tensor(data=[[float("nan")] + [0.5] * 15])}),
        "invalid_input",
        "input 'x' holds NaN or infinity",
        id="nan-forbidden",
    ),
    pytest.param(
        mlp_event(inputs={"x": x_tensor(data=[[float("-inf")] + [0.5] * 15])}),
        "invalid_input",
        "NaN or infinity",
        id="inf-forbidden",
    ),
    pytest.param(
        mlp_event(inputs={"x": x_tensor(data=..., b64=b64(np.full((1, 16), np.inf, dtype="<f4")))}),
        "invalid_input",
        "NaN or infinity",
        id="inf-in-b64-forbidden",
    ),
    pytest.param(
        mlp_event(inputs={"x": x_tensor(dtype="float16", data=[[1e10] * 16])}),
        "invalid_input",
        "must be float32, got float16",
        id="float16-for-float32",
    ),
    # payload: data / b64
    pytest.param(
        mlp_event(inputs={"x": x_tensor(data=..., b64=b64(np.zeros((1, 15), dtype="<f4")))}),
        "invalid_input",
        "`b64` holds 60 bytes; shape [1, 16] of float32 needs 64",
        id="b64-wrong-byte-count",
    ),
    pytest.param(
        mlp_event(inputs={"x": x_tensor(data=..., b64="not base64!")}),
        "invalid_input",
        "`b64` is not valid base64",
        id="b64-not-base64",
    ),
    pytest.param(
        mlp_event(inputs={"x": x_tensor(data=..., b64="AAAA-_AA")}),
        "invalid_input",
        "the standard alphabet A-Z a-z 0-9 + /, padded with =",
        id="b64-url-safe-alphabet",
    ),
    pytest.param(
        mlp_event(inputs={"x": x_tensor(b64=b64(np.zeros((1, 16), dtype="<f4")))}),
        "invalid_input",
        "exactly one of `data` (nested list), `b64` or `raw`",
        id="data-and-b64",
    ),
    pytest.param(
        mlp_event(inputs={"x": x_tensor(data=...)}),
        "invalid_input",
        "exactly one of `data` (nested list), `b64` or `raw`",
        id="neither-data-nor-b64",
    ),
    # names
    pytest.param(
        mlp_event(inputs={"x": x_tensor(), "z": x_tensor()}),
        "invalid_input",
        "unknown input(s) ['z']",
        id="unknown-input",
    ),
    pytest.param(
        mlp_event(model="demo-encoder", inputs={"input_ids": encoder_inputs([1, 4])["input_ids"]}),
        "invalid_input",
        "missing input(s) ['attention_mask']",
        id="missing-input",
    ),
    pytest.param(
        mlp_event(model="demo-encoder", inputs=encoder_inputs([2, 4], [1, 4])),
        "invalid_input",
        "inputs disagree on the batch dimension (2 vs 1)",
        id="batch-dims-disagree",
    ),
    # text
    pytest.param(
        mlp_event(inputs={"x": {"text": "hello"}}),
        "invalid_input",
        "model 'demo-mlp' has no tokenizer",
        id="text-to-model-without-tokenizer",
    ),
    pytest.param(
        mlp_event(model="demo-encoder", inputs={"text": {"text": "hi"}, **encoder_inputs([1, 4])}),
        "invalid_input",
        "send one text input, or tensors, not both",
        id="text-and-tensors",
    ),
    pytest.param(
        mlp_event(model="demo-encoder", inputs={"text": {"text": []}}),
        "invalid_input",
        "empty batch",
        id="text-empty-list",
    ),
    pytest.param(
        mlp_event(model="demo-encoder", inputs={"text": {"text": ["ok", ""]}}),
        "invalid_input",
        "non-empty string",
        id="text-empty-string",
    ),
    # deadlines (now is 12:00:00, the event was produced at 11:59:59)
    pytest.param(
        mlp_event(deadline="2025-01-01T11:59:59.500Z"),
        "deadline_exceeded",
        "passed before ingest",
        id="deadline-passed",
    ),
    pytest.param(
        mlp_event(deadline="2025-01-01T12:00:00Z"),
        "deadline_exceeded",
        "passed before ingest",
        id="deadline-now",
    ),
    pytest.param(
        mlp_event(timeout_ms=500),
        "deadline_exceeded",
        "2025-01-01T11:59:59.500000+00:00 passed",
        id="timeout-since-produce-passed",
    ),
    pytest.param(
        mlp_event(timeout_ms=5_000, created_at="2025-01-01T11:59:50Z"),
        "deadline_exceeded",
        "11:59:55",
        id="timeout-since-created-passed",
    ),
]


@pytest.mark.parametrize(("event", "status", "message"), ANSWERS)
def test_bad_requests_are_answered_with_a_named_status(
    event: dict[str, Any],
    status: str,
    message: str,
    catalog: FakeCatalog,
    settings: IngestSettings,
) -> None:
    outcome = run(encode(event), catalog, settings)

    assert isinstance(outcome, Answer), outcome
    result = outcome.result
    assert result.status == status
    assert outcome.error.status == status
    assert result.error is not None
    assert result.error.code == status
    assert message in result.error.message
    assert result.request_id == event["request_id"]
    assert outcome.key == event["request_id"].encode()
    assert outcome.topic == event.get("reply_to", RESULTS)
    assert result.tenant == event.get("tenant")
    assert result.model == event.get("model", "")
    assert result.outputs == {}
    assert result.timings.ingest_ms is not None
    assert result.completed_at is not None


def test_oversized_event_is_answered_before_validation(
    catalog: FakeCatalog, settings: IngestSettings
) -> None:
    event = mlp_event(metadata={"padding": "p" * settings.max_event_bytes})
    value = encode(event)

    outcome = run(value, catalog, settings)

    assert isinstance(outcome, Answer)
    assert outcome.result.status == "invalid_input"
    assert (
        f"event is {len(value)} bytes; the limit is 65536 (INFERBUS_INGEST_MAX_EVENT_BYTES)"
        in outcome.result.error.message
    )  # type: ignore[union-attr]
    assert outcome.error.context == {"size": len(value)}


ILLEGAL = "legal Kafka topic name"
OURS = "one of inferbus's own topics"


@pytest.mark.parametrize(
    ("reply_to", "said"),
    [
        pytest.param("bad topic!", ILLEGAL, id="space-and-bang"),
        pytest.param("..", ILLEGAL, id="dot-dot"),
        pytest.param(".", ILLEGAL, id="dot"),
        pytest.param("", ILLEGAL, id="empty"),
        pytest.param("t" * 250, ILLEGAL, id="too-long"),
        pytest.param("inferbus/results", ILLEGAL, id="slash"),
        # Regression: `re.match` let "$" match before a trailing newline.
        pytest.param("inferbus.results\n", ILLEGAL, id="trailing-newline"),
        pytest.param("inferbus.ingest", OURS, id="ingest-would-read-it-as-a-request"),
        pytest.param("inferbus.ingest.critical", OURS, id="per-tier-ingest"),
        pytest.param("inferbus.req.demo-mlp.interactive", OURS, id="a-request-topic"),
        pytest.param("inferbus.instances", OURS, id="the-registry"),
        pytest.param("inferbus.rollouts", OURS, id="rollout-state"),
        pytest.param("inferbus.telemetry", OURS, id="telemetry"),
        pytest.param("inferbus.dlq", OURS, id="the-dlq"),
        pytest.param("inferbus.resultsx", OURS, id="results-prefix-without-dot"),
    ],
)
def test_a_reply_to_results_may_not_go_to_is_answered_on_the_default_results_topic(
    reply_to: str, said: str, catalog: FakeCatalog, settings: IngestSettings
) -> None:
    outcome = run(encode(mlp_event(reply_to=reply_to)), catalog, settings)

    assert isinstance(outcome, Answer)
    assert outcome.topic == RESULTS
    assert outcome.result.status == "invalid_input"
    assert "reply_to" in outcome.result.error.message  # type: ignore[union-attr]
    assert said in outcome.result.error.message  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "reply_to", ["inferbus.results", "inferbus.results.team-a", "team-a.inferbus.results"]
)
def test_result_topics_are_legal_reply_topics(
    reply_to: str, catalog: FakeCatalog, settings: IngestSettings
) -> None:
    outcome = run(encode(mlp_event(reply_to=reply_to)), catalog, settings)

    assert isinstance(outcome, Route), outcome


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        pytest.param({"timeout_ms": 2**31}, "less than or equal to 2147483647", id="over-int32"),
        pytest.param({"timeout_ms": 10**30}, "less than or equal to 2147483647", id="1e30"),
    ],
)
def test_timeouts_beyond_the_bound_are_invalid_not_internal_errors(
    changes: dict[str, Any], message: str, catalog: FakeCatalog, settings: IngestSettings
) -> None:
    outcome = run(encode(mlp_event(**changes)), catalog, settings)

    assert isinstance(outcome, Answer), outcome
    assert outcome.result.status == "invalid_input"
    assert message in outcome.result.error.message  # type: ignore[union-attr]


def test_a_deadline_past_the_year_9999_is_no_deadline(
    catalog: FakeCatalog, settings: IngestSettings
) -> None:
    event = mlp_event(created_at="9999-12-31T23:59:59Z", timeout_ms=2**31 - 1)

    outcome = run(encode(event), catalog, settings)

    assert isinstance(outcome, Route), outcome
    assert h.DEADLINE not in dict(outcome.headers)


def test_reply_to_that_is_not_a_string_falls_back_to_results(
    catalog: FakeCatalog, settings: IngestSettings
) -> None:
    outcome = run(encode(mlp_event(reply_to=["a"])), catalog, settings)

    assert isinstance(outcome, Answer)
    assert outcome.topic == RESULTS
    assert "reply_to" in outcome.result.error.message  # type: ignore[union-attr]


def test_answer_goes_to_a_legal_reply_to(catalog: FakeCatalog, settings: IngestSettings) -> None:
    outcome = run(encode(mlp_event(model="nope", reply_to="team-a.results")), catalog, settings)

    assert isinstance(outcome, Answer)
    assert outcome.topic == "team-a.results"


@pytest.mark.parametrize(
    ("changes", "tier"),
    [
        pytest.param({}, "interactive", id="default-tier"),
        pytest.param({"tier": "batch"}, "batch", id="named-tier"),
        pytest.param({"tier": "urgent"}, "-", id="unknown-tier"),
        pytest.param({"tier": 7}, "-", id="not-a-string"),
    ],
)
def test_answer_carries_the_tier_label(
    catalog: FakeCatalog, settings: IngestSettings, changes: dict[str, Any], tier: str
) -> None:
    outcome = run(encode(mlp_event(model="nope", **changes)), catalog, settings)

    assert isinstance(outcome, Answer)
    assert outcome.tier == tier


@pytest.mark.parametrize(
    ("depth", "routed"),
    [
        pytest.param(None, True, id="depth-unknown"),
        pytest.param(0, True, id="empty"),
        pytest.param(4, True, id="below-bound"),
        pytest.param(5, False, id="at-bound"),
        pytest.param(9_999, False, id="far-over-bound"),
    ],
)
def test_queue_over_its_bound_is_rejected_at_once(
    depth: int | None, routed: bool, catalog: FakeCatalog, settings: IngestSettings
) -> None:
    catalog.configs["demo-mlp"] = with_changes(
        catalog.configs["demo-mlp"],
        slo={"interactive": {"p99_e2e_ms": 500, "max_queue": 5}},
    )
    if depth is not None:
        catalog.depths[MLP_TOPIC] = depth

    outcome = run(encode(mlp_event()), catalog, settings)

    if routed:
        assert isinstance(outcome, Route)
        return
    assert isinstance(outcome, Answer)
    assert outcome.result.status == "rejected_overload"
    assert isinstance(outcome.error, Overloaded)
    assert outcome.error.context == {"tier": "interactive", "lag": depth, "bound": 5}
    message = outcome.result.error.message  # type: ignore[union-attr]
    assert "tier 'interactive'" in message
    assert f"has {depth} queued requests" in message
    assert "bound of 5" in message


def test_overload_is_checked_per_tier(catalog: FakeCatalog, settings: IngestSettings) -> None:
    catalog.depths[MLP_TOPIC] = 10**9

    outcome = run(encode(mlp_event(tier="critical")), catalog, settings)

    assert isinstance(outcome, Route)
    assert outcome.topic == "inferbus.req.demo-mlp.critical"


@pytest.mark.parametrize(
    ("event", "error_type"),
    [
        pytest.param(mlp_event(model="nope"), ModelNotFound, id="model-not-found"),
        pytest.param(mlp_event(model="mlp-team-a", tenant="x"), Unauthorized, id="unauthorized"),
        pytest.param(mlp_event(timeout_ms=1), DeadlineExceeded, id="deadline"),
        pytest.param(mlp_event(tier="gold"), InvalidInput, id="invalid"),
    ],
)
def test_answer_carries_the_error_object(
    event: dict[str, Any],
    error_type: type[Exception],
    catalog: FakeCatalog,
    settings: IngestSettings,
) -> None:
    outcome = run(encode(event), catalog, settings)

    assert isinstance(outcome, Answer)
    assert type(outcome.error) is error_type


# ---- routed ----------------------------------------------------------------------------------

ROUTES = [
    pytest.param(mlp_event(), "inferbus.req.demo-mlp.interactive", id="mlp-list-data"),
    pytest.param(
        mlp_event(
            inputs={"x": x_tensor(data=..., b64=b64(np.ones((2, 16), "<f4")), shape=[2, 16])}
        ),
        "inferbus.req.demo-mlp.interactive",
        id="mlp-b64",
    ),
    pytest.param(mlp_event(tier=...), "inferbus.req.demo-mlp.interactive", id="tier-defaults"),
    pytest.param(mlp_event(tier="critical"), "inferbus.req.demo-mlp.critical", id="critical"),
    pytest.param(mlp_event(tier="batch"), "inferbus.req.demo-mlp.batch", id="batch"),
    pytest.param(
        mlp_event(reply_to=...), "inferbus.req.demo-mlp.interactive", id="reply-to-defaults"
    ),
    pytest.param(
        mlp_event(model_version="2"), "inferbus.req.demo-mlp.interactive", id="pinned-version"
    ),
    pytest.param(
        mlp_event(tenant=...), "inferbus.req.demo-mlp.interactive", id="no-tenant-any-allowed"
    ),
    pytest.param(
        mlp_event(model="mlp-team-a"), "inferbus.req.mlp-team-a.interactive", id="allowed-tenant"
    ),
    pytest.param(
        mlp_event(model="mlp-batch-only", tier="batch"),
        "inferbus.req.mlp-batch-only.batch",
        id="served-tier",
    ),
    pytest.param(
        mlp_event(model="mlp-nan-ok", inputs={"x": x_tensor(data=[[float("nan")] * 16])}),
        "inferbus.req.mlp-nan-ok.interactive",
        id="nan-allowed-by-spec",
    ),
    pytest.param(
        mlp_event(surprise={"a": 1}, schema_extra=True),
        "inferbus.req.demo-mlp.interactive",
        id="extra-fields",
    ),
    pytest.param(
        mlp_event(model="demo-encoder", inputs=encoder_inputs([2, 7])),
        "inferbus.req.demo-encoder.interactive",
        id="encoder-tensors",
    ),
    pytest.param(
        mlp_event(model="demo-encoder", inputs={"text": {"text": ["hello", "world"]}}),
        "inferbus.req.demo-encoder.interactive",
        id="encoder-text",
    ),
    pytest.param(
        mlp_event(deadline="2025-01-01T12:00:01Z"),
        "inferbus.req.demo-mlp.interactive",
        id="deadline-ahead",
    ),
    pytest.param(
        mlp_event(timeout_ms=5_000), "inferbus.req.demo-mlp.interactive", id="timeout-ahead"
    ),
]


@pytest.mark.parametrize(("event", "topic"), ROUTES)
def test_valid_requests_route_to_their_tier_topic_unchanged(
    event: dict[str, Any], topic: str, catalog: FakeCatalog, settings: IngestSettings
) -> None:
    value = encode(event)

    outcome = run(value, catalog, settings)

    assert isinstance(outcome, Route), outcome
    assert outcome.topic == topic
    assert outcome.key == b"r-1"
    assert outcome.value is value  # the producer's bytes, not a re-encoding
    assert outcome.request.request_id == "r-1"
    headers = dict(outcome.headers)
    assert headers[h.CONTENT_TYPE] == h.JSON
    assert headers[h.SCHEMA] == h.REQUEST_SCHEMA_V1
    assert headers[h.TIER] == topic.rsplit(".", 1)[1].encode()
    assert headers[h.PRODUCED_AT] == str(int(PRODUCED_AT.timestamp() * 1000)).encode()
    assert float(headers[h.INGEST_MS]) >= 0


@pytest.mark.parametrize(
    ("changes", "sent_to", "routed_to", "refused"),
    [
        pytest.param({"tier": ...}, "batch", "batch", None, id="no-tier-takes-the-topics"),
        pytest.param({"tier": "batch"}, "batch", "batch", None, id="same-tier"),
        pytest.param({"tier": ...}, None, "interactive", None, id="shared-topic-default"),
        pytest.param({"tier": "critical"}, None, "critical", None, id="shared-topic-named"),
        pytest.param(
            {"tier": "critical"},
            "batch",
            None,
            "request says tier 'critical' but was sent to 'inferbus.ingest.batch'",
            id="another-tier-is-refused",
        ),
    ],
)
def test_a_per_tier_ingest_topic_sets_the_tier(
    changes: dict[str, Any],
    sent_to: Any,
    routed_to: str | None,
    refused: str | None,
    catalog: FakeCatalog,
    settings: IngestSettings,
) -> None:
    outcome = handle_event(
        encode(mlp_event(**changes)),
        produced_at=PRODUCED_AT,
        catalog=catalog,
        settings=settings,
        now=NOW,
        sent_to_tier=sent_to,
    )
    if refused is None:
        assert isinstance(outcome, Route), outcome
        assert outcome.topic == f"inferbus.req.demo-mlp.{routed_to}"
        assert dict(outcome.headers)[h.TIER] == str(routed_to).encode()
    else:
        assert isinstance(outcome, Answer), outcome
        assert outcome.result.status == "invalid_input"
        assert outcome.result.error is not None and refused in outcome.result.error.message


@pytest.mark.parametrize(
    ("changes", "deadline"),
    [
        pytest.param({}, None, id="none"),
        pytest.param(
            {"timeout_ms": 5_000}, PRODUCED_AT + timedelta(seconds=5), id="timeout-from-produce"
        ),
        pytest.param(
            {"timeout_ms": 5_000, "created_at": "2025-01-01T11:59:58Z"},
            PRODUCED_AT + timedelta(seconds=4),
            id="timeout-from-created",
        ),
        pytest.param(
            {"deadline": "2025-01-01T13:00:02+01:00"},
            NOW + timedelta(seconds=2),
            id="absolute-with-zone",
        ),
        pytest.param(
            {"deadline": "2025-01-01T12:00:30", "timeout_ms": 1},
            NOW + timedelta(seconds=30),
            id="naive-deadline-is-utc-and-wins",
        ),
    ],
)
def test_route_headers_carry_the_absolute_deadline(
    changes: dict[str, Any], deadline: Any, catalog: FakeCatalog, settings: IngestSettings
) -> None:
    outcome = run(encode(mlp_event(**changes)), catalog, settings)

    assert isinstance(outcome, Route), outcome
    headers = dict(outcome.headers)
    if deadline is None:
        assert h.DEADLINE not in headers
    else:
        assert headers[h.DEADLINE] == str(int(deadline.timestamp() * 1000)).encode()


# ---- a real repository behind the catalog ---------------------------------------------------


def _demo_catalog(root: Path, served: Sequence[Tier] = TIERS) -> CachedModelCatalog:
    return CachedModelCatalog(
        ModelRepository(root),
        refresh_s=60,
        depths=QueueDepths("unused:9092", refresh_ms=500),
        served_tiers=served,
    )


def _handled(
    catalog: CachedModelCatalog, settings: IngestSettings, **changes: Any
) -> Route | Answer:
    return handle_event(
        encode(mlp_event(**changes)),
        produced_at=PRODUCED_AT,
        catalog=catalog,
        settings=settings,
        now=NOW,
    )


@pytest.fixture(scope="module")
def repository_catalog(tmp_path_factory: pytest.TempPathFactory) -> CachedModelCatalog:
    root = tmp_path_factory.mktemp("models")
    write_demo_models(root)
    return _demo_catalog(root)


@pytest.mark.parametrize(
    ("changes", "status"),
    [
        pytest.param({}, None, id="ok"),
        pytest.param(
            {"model": "demo-encoder", "inputs": encoder_inputs([1, 3])}, None, id="encoder"
        ),
        pytest.param({"model_version": "1"}, None, id="version-1"),
        pytest.param({"model_version": "2"}, "model_not_found", id="version-2-absent"),
        pytest.param({"model": "missing"}, "model_not_found", id="no-such-folder"),
        # Regressions: these found the demo-mlp folder and routed to an illegal topic name.
        pytest.param({"model": "demo-mlp/"}, "model_not_found", id="trailing-slash"),
        pytest.param({"model": "./demo-mlp"}, "model_not_found", id="dot-slash"),
        pytest.param({"model": "../x/../demo-mlp"}, "model_not_found", id="dot-dot"),
        pytest.param({"model": "Demo-Mlp"}, "model_not_found", id="upper-case"),
        pytest.param({"model": "demo-mlp\n"}, "model_not_found", id="trailing-newline"),
    ],
)
def test_demo_repository_behind_the_catalog(
    changes: dict[str, Any],
    status: str | None,
    repository_catalog: CachedModelCatalog,
    settings: IngestSettings,
) -> None:
    outcome = _handled(repository_catalog, settings, **changes)

    if status is None:
        assert isinstance(outcome, Route), outcome
        return
    assert isinstance(outcome, Answer)
    assert outcome.result.status == status


@pytest.mark.parametrize(
    ("served", "model_tiers", "tier", "words"),
    [
        pytest.param(["interactive"], None, "interactive", None, id="served"),
        pytest.param(
            ["interactive"],
            None,
            "batch",
            "not served on tier 'batch' (tiers: interactive)",
            id="other",
        ),
        pytest.param(
            ["critical", "interactive"],
            None,
            "batch",
            "(tiers: critical, interactive)",
            id="two-served",
        ),
        pytest.param(["interactive"], "- batch", "batch", "(tiers: none)", id="none"),
    ],
)
def test_a_tier_the_deployment_runs_no_workers_for_is_refused(
    served: list[Tier],
    model_tiers: str | None,
    tier: str,
    words: str | None,
    tmp_path: Path,
    settings: IngestSettings,
) -> None:
    """Regression: `inferbus up --tiers interactive` took a batch request and routed it to
    a topic no worker reads: never answered, not even at its deadline."""
    write_demo_models(tmp_path)
    if model_tiers is not None:  # demo-mlp's own `tiers` in its model.yaml
        yaml = tmp_path / "demo-mlp" / "model.yaml"
        yaml.write_text(yaml.read_text().replace("- critical\n- interactive\n- batch", model_tiers))

    outcome = _handled(_demo_catalog(tmp_path, served), settings, tier=tier)

    if words is None:
        assert isinstance(outcome, Route), outcome
        return
    assert isinstance(outcome, Answer)
    assert outcome.result.status == "invalid_input"
    assert outcome.result.error is not None and words in outcome.result.error.message


def test_served_narrows_a_config_only_where_it_must(tmp_path: Path) -> None:
    write_demo_models(tmp_path)
    config = ModelRepository(tmp_path).config("demo-mlp")

    assert served(config, TIERS) is config
    assert served(config, ("batch", "critical")).tiers == ["critical", "batch"], "model's order"


# ---- never raises ----------------------------------------------------------------------------

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=20,
)
_events = st.fixed_dictionaries(
    {"request_id": st.text(min_size=1, max_size=10)},
    optional={
        "model": st.sampled_from(["demo-mlp", "demo-encoder", "nope", ""]) | _json,
        "tier": st.sampled_from(["critical", "interactive", "batch", "gold"]) | _json,
        "inputs": st.dictionaries(st.sampled_from(["x", "input_ids", "text"]), _json, max_size=2)
        | _json,
        "reply_to": st.text(max_size=10) | _json,
        "timeout_ms": st.integers() | _json,
        "deadline": _json,
        "tenant": _json,
    },
)


@given(value=st.binary(max_size=200) | _json.map(lambda v: json.dumps(v).encode()))
@hsettings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_never_raises_on_arbitrary_bytes(
    value: bytes, catalog: FakeCatalog, settings: IngestSettings
) -> None:
    assert isinstance(run(value, catalog, settings), Route | Answer | DeadLetter)


@given(event=_events)
@hsettings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_every_event_with_a_request_id_is_answered_or_routed(
    event: dict[str, Any], catalog: FakeCatalog, settings: IngestSettings
) -> None:
    outcome = run(json.dumps(event).encode(), catalog, settings)

    assert isinstance(outcome, Route | Answer)
    if isinstance(outcome, Answer):
        assert outcome.result.request_id == event["request_id"]
        assert outcome.result.error is not None


# ---- shedding: a queue that would outlast the request, an ingest that is behind -------------


@pytest.mark.parametrize(
    ("changes", "depth", "rate", "rejected"),
    [
        pytest.param({"timeout_ms": 5_000}, 100, 10.0, True, id="10s-of-queue-5s-deadline"),
        pytest.param({"timeout_ms": 5_000}, 100, 50.0, False, id="2s-of-queue-5s-deadline"),
        # 4.2 s of queue fits in 5 s, but not in the admitted share of it (0.75: 3.75 s).
        pytest.param({"timeout_ms": 5_000}, 100, 24.0, True, id="over-the-admitted-share"),
        pytest.param({}, 100, 10.0, False, id="no-deadline-queues"),
        pytest.param({"timeout_ms": 5_000}, 100, None, False, id="queue-not-growing"),
    ],
)
def test_a_queue_that_would_outlast_the_deadline_rejects_at_once(
    catalog: FakeCatalog,
    settings: IngestSettings,
    changes: dict[str, Any],
    depth: int,
    rate: float | None,
    rejected: bool,
) -> None:
    catalog.depths[MLP_TOPIC] = depth
    if rate is not None:
        catalog.rates[MLP_TOPIC] = rate

    outcome = run(
        encode(mlp_event(created_at=PRODUCED_AT.isoformat(), **changes)), catalog, settings
    )

    if rejected:
        assert isinstance(outcome, Answer)
        assert outcome.result.status == "rejected_overload"
        assert "left before its deadline" in outcome.result.error.message  # type: ignore[union-attr]
    else:
        assert isinstance(outcome, Route)


@pytest.mark.parametrize(
    ("tier", "behind_s", "rejected"),
    [
        pytest.param("batch", 3.0, True, id="batch-shed-when-behind"),
        pytest.param("batch", 1.0, False, id="batch-fine-when-caught-up"),
        pytest.param("interactive", 3.0, False, id="interactive-never-shed"),
    ],
)
def test_batch_is_shed_first_when_ingest_falls_behind(
    catalog: FakeCatalog, settings: IngestSettings, tier: str, behind_s: float, rejected: bool
) -> None:
    produced = NOW - timedelta(seconds=behind_s)
    outcome = handle_event(
        encode(mlp_event(tier=tier)),
        produced_at=produced,
        catalog=catalog,
        settings=settings,
        now=NOW,
    )

    if rejected:
        assert isinstance(outcome, Answer)
        assert outcome.result.status == "rejected_overload"
        assert "batch requests are shed first" in outcome.result.error.message  # type: ignore[union-attr]
    else:
        assert isinstance(outcome, Route)


def framed_mlp(*payload: bytes, **raw: int) -> bytes:
    """A demo-mlp frame whose one tensor points at `raw` in `payload`."""
    x = {"dtype": "float32", "shape": [1, 16], "raw": raw}
    return join_frame(encode(mlp_event(inputs={"x": x})).replace(b" ", b""), payload)


X_BYTES = np.arange(16, dtype="<f4").tobytes()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        pytest.param(
            framed_mlp(b"   ", X_BYTES, offset=0, nbytes=64),
            "holds 67 bytes and bytes 64-66 are in no tensor's `raw` slice",
            id="stray-bytes-before-the-tensor",
        ),
        pytest.param(
            framed_mlp(b"   ", X_BYTES, offset=3, nbytes=64),
            "bytes 0-2 are in no tensor's `raw` slice",
            id="a-gap-before-the-tensor",
        ),
        pytest.param(
            framed_mlp(X_BYTES, b"\0" * 8, offset=0, nbytes=64),
            "holds 72 bytes and bytes 64-71",
            id="trailing-bytes",
        ),
    ],
)
def test_a_frame_payload_with_bytes_no_tensor_reads_is_refused(
    value: bytes, message: str, catalog: FakeCatalog, settings: IngestSettings
) -> None:
    """A framer that counts the envelope short shifts every tensor: answered `ok` on the
    wrong numbers until the payload had to be exactly the tensors' bytes."""
    outcome = run(value, catalog, settings)

    assert isinstance(outcome, Answer), outcome
    assert outcome.result.status == "invalid_input"
    assert outcome.result.error is not None
    assert message in outcome.result.error.message
    assert outcome.framed


def test_a_frame_whose_payload_is_exactly_its_tensors_is_routed(
    catalog: FakeCatalog, settings: IngestSettings
) -> None:
    assert isinstance(run(framed_mlp(X_BYTES, offset=0, nbytes=64), catalog, settings), Route)


def test_a_json_event_after_a_byte_order_mark_is_routed(
    catalog: FakeCatalog, settings: IngestSettings
) -> None:
    """RFC 8259 lets a parser ignore a BOM, and some .NET writers add one."""
    assert isinstance(run(b"\xef\xbb\xbf" + encode(mlp_event()), catalog, settings), Route)


@pytest.mark.parametrize(
    ("inputs", "words"),
    [
        pytest.param(
            {"x": x_tensor(), **{f"extra{i:05d}": x_tensor() for i in range(10_000)}},
            "(+9995 more)",
            id="ten-thousand-unknown-inputs",
        ),
        pytest.param(
            {"x": x_tensor(shape=[1] * 10_000, data=..., b64="AAAA")},
            "(rank 10000)",
            id="rank-ten-thousand",
        ),
        pytest.param(
            {"x": x_tensor(shape=[1, 10**400], data=..., b64="AAAA")},
            "<a 401-digit number>",
            id="a-401-digit-dimension",
        ),
        pytest.param(
            {"x": x_tensor(), "y" * 5000: x_tensor()},
            "characters in all)",
            id="a-5000-character-input-name",
        ),
    ],
)
def test_an_error_message_stays_short_whatever_the_event_quotes(
    inputs: dict[str, Any], words: str, catalog: FakeCatalog
) -> None:
    """An error quoted what the event sent: 10,000 unknown names made an 89 KB result."""
    roomy = IngestSettings(max_event_bytes=4_000_000)
    outcome = run(encode(mlp_event(inputs=inputs)), catalog, roomy)

    assert isinstance(outcome, Answer), outcome
    assert outcome.result.error is not None
    message = outcome.result.error.message
    assert words in message
    assert len(message) <= MESSAGE_MAX_CHARS + len(" (model=demo-mlp)")


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(encode(mlp_event()).decode().encode("utf-16-le"), id="utf-16"),
        pytest.param(b"\xef\xbb\xbf\xef\xbb\xbf" + encode(mlp_event()), id="two-byte-order-marks"),
    ],
)
def test_an_event_that_is_not_utf8_json_is_dead_lettered_not_guessed_at(
    value: bytes, catalog: FakeCatalog, settings: IngestSettings
) -> None:
    """Python's parser, the fallback for JSON orjson refuses, guesses UTF-16 from bytes."""
    assert isinstance(run(value, catalog, settings), DeadLetter)


def test_a_lone_surrogate_in_the_tenant_is_answered_without_it(
    catalog: FakeCatalog, settings: IngestSettings
) -> None:
    """The answer must encode: a tenant no UTF-8 can carry is left out of it."""
    value = encode(mlp_event(tenant="T")).replace(b'"T"', b'"\\ud800"')
    outcome = run(value, catalog, settings)

    assert isinstance(outcome, Answer), outcome
    assert outcome.result.status == "invalid_input"
    assert outcome.result.tenant is None
    assert b"tenant: a lone" in outcome.result.model_dump_json().encode()


def test_a_text_request_in_a_frame_with_payload_bytes_is_refused(
    catalog: FakeCatalog, settings: IngestSettings
) -> None:
    event = mlp_event(model="demo-encoder", inputs={"text": {"text": "hello"}})
    outcome = run(join_frame(encode(event), [b"\0" * 4]), catalog, settings)

    assert isinstance(outcome, Answer), outcome
    assert outcome.result.error is not None
    assert "bytes 0-3 are in no tensor's `raw` slice" in outcome.result.error.message


def test_an_oversized_model_or_tenant_is_echoed_cut(catalog: FakeCatalog) -> None:
    """A refused event's answer echoed its 500 KB model name whole."""
    roomy = IngestSettings(max_event_bytes=4_000_000)
    outcome = run(encode(mlp_event(model="m" * 100_000, tenant="t" * 100_000)), catalog, roomy)

    assert isinstance(outcome, Answer), outcome
    assert outcome.result.status == "invalid_input"
    assert outcome.result.model == "m" * 127 + "…"
    assert outcome.result.tenant == "t" * 127 + "…"
    assert len(outcome.result.model_dump_json()) < 3_000

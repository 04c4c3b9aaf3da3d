"""A request in a worker's hands: decoded at poll time, answered exactly once."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
from aiokafka import ConsumerRecord
from opentelemetry.trace import Span
from pydantic import ValidationError

from infra.models.config import ModelConfig
from infra.models.inputs import validate_inputs
from schemas import headers as h
from schemas.errors import InferbusError, InvalidInput, Unparseable
from schemas.request import InferenceRequest
from schemas.tensors import Tensor
from schemas.topics import RESULTS, Tier, is_legal_topic

Arrays = dict[str, np.ndarray[Any, Any]]
Tokenize = Any  # callable(texts) -> Arrays, supplied by the engine host for text models


@dataclass
class InHand:
    """One polled record and everything needed to answer it."""

    topic: str
    partition: int
    offset: int
    tier: Tier
    request_id: str
    reply_to: str
    model: str
    tenant: str | None
    headers: list[tuple[str, bytes]]
    record_ts_ms: float
    polled_at_s: float
    polled_mono: float
    produced_ms: float | None
    ingest_ms: float | None
    deadline_s: float | None
    request: InferenceRequest | None = None
    arrays: Arrays | None = None
    samples: int = 0
    length: int | None = None
    preprocess_ms: float = 0.0
    error: InferbusError | None = None
    batch_wait_ms: float | None = field(default=None)
    polled_ns: int = 0
    output_encoding: str = "list"
    """Outputs mirror the request's tensor form: `b64` when its inputs came as b64."""
    span: Span | None = None

    @property
    def expired(self) -> bool:
        return self.deadline_s is not None and time.time() >= self.deadline_s


def _deadline_s(
    request: InferenceRequest | None, record: ConsumerRecord[bytes, bytes]
) -> float | None:
    header = h.header_float(record.headers, h.DEADLINE)
    if header is not None:
        return header / 1000
    if request is None:
        return None
    received = datetime.fromtimestamp(record.timestamp / 1000, UTC)
    deadline = request.effective_deadline(received)
    return deadline.timestamp() if deadline is not None else None


def decode_record(
    record: ConsumerRecord[bytes, bytes],
    *,
    tier: Tier,
    config: ModelConfig,
    tokenize: Tokenize | None,
    max_samples: int,
) -> InHand:
    """Parse and check one record; errors become `InHand.error`, never exceptions.

    Raises Unparseable only when there is no request id to answer (the caller dead-letters).
    """
    started = time.perf_counter()
    now = time.time()
    request: InferenceRequest | None = None
    invalid: ValidationError | None = None
    try:
        # pydantic-core parses and validates in one pass; plain JSON only for the error path.
        request = InferenceRequest.model_validate_json(record.value or b"")
        raw: Any = {
            "request_id": request.request_id,
            "reply_to": request.reply_to,
            "model": request.model,
            "tenant": request.tenant,
        }
    except ValidationError as exc:
        invalid = exc
        try:
            raw = json.loads(record.value) if record.value is not None else None
        except (ValueError, RecursionError) as json_exc:  # incl. over-long ints, deep nesting
            raise Unparseable(f"record is not JSON: {json_exc}") from json_exc
    if (
        not isinstance(raw, dict)
        or not isinstance(raw.get("request_id"), str)
        or not raw["request_id"]
    ):
        raise Unparseable("record has no usable request_id")
    reply_to = raw.get("reply_to")
    item = InHand(
        topic=record.topic,
        partition=record.partition,
        offset=record.offset,
        tier=tier,
        request_id=raw["request_id"],
        reply_to=reply_to if isinstance(reply_to, str) and is_legal_topic(reply_to) else RESULTS,
        model=str(raw.get("model") or config.name),
        tenant=raw.get("tenant") if isinstance(raw.get("tenant"), str) else None,
        headers=list(record.headers or ()),
        record_ts_ms=float(record.timestamp),
        polled_at_s=now,
        polled_mono=time.monotonic(),
        polled_ns=time.time_ns(),
        produced_ms=h.header_float(record.headers, h.PRODUCED_AT),
        ingest_ms=h.header_float(record.headers, h.INGEST_MS),
        deadline_s=None,
    )
    try:
        if invalid is not None:
            raise invalid
        assert request is not None
        item.request = request
        item.deadline_s = _deadline_s(request, record)
        if any(isinstance(t, Tensor) and t.b64 is not None for t in request.inputs.values()):
            item.output_encoding = "b64"
        if request.model != config.name:
            raise InvalidInput(
                f"request for model {request.model!r} reached a worker of {config.name!r}",
                model=request.model,
            )
        arrays, texts, samples = validate_inputs(
            request, config, max_tensor_bytes=2**31, max_samples=max_samples
        )
        if texts is not None:
            if tokenize is None:
                raise InvalidInput(f"model {config.name!r} cannot tokenize text here")
            try:
                arrays = tokenize(texts)
            except InferbusError:
                raise
            except Exception as exc:  # a tokenizer bug must not kill the poll loop
                raise InvalidInput(
                    f"tokenization failed: {type(exc).__name__}: {str(exc)[:200]}"
                ) from exc
        item.arrays = arrays
        item.samples = samples
        seq = config.batching.sequence_input
        if seq is not None and seq in arrays and arrays[seq].ndim >= 2:
            item.length = int(arrays[seq].shape[1])
    except ValidationError as exc:
        item.error = InvalidInput(
            "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or '<event>'}: {e['msg']}"
                for e in exc.errors()[:5]
            )
        )
    except InferbusError as exc:
        item.error = exc
    item.preprocess_ms = (time.perf_counter() - started) * 1000
    return item

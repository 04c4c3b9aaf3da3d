"""A request in a worker's hands: decoded at poll time, answered exactly once."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aiokafka import ConsumerRecord

from infra.lenient_fetch import unreadable_reason
from infra.models.config import ModelConfig
from infra.models.inputs import index_errors, validate_inputs
from schemas import headers as h
from schemas.errors import InferbusError, InvalidInput, ModelNotFound, Unparseable
from schemas.parse import ParsedRequest, RejectedEvent, parse_request
from schemas.tensors import Arrays, Tensor
from schemas.topics import Tier
from services.runtime.result_wire import OutputForm
from tracing.sampling import TraceRef, parse_traceparent

if TYPE_CHECKING:
    from services.worker.spans import RequestSpans

Tokenize = Callable[[list[str]], Arrays]
"""Texts to the model's input arrays (the worker's tokenizer)."""


@dataclass(slots=True)
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
    polled_ns: int
    produced_ms: float | None = None
    ingest_ms: float | None = None
    deadline_s: float | None = None
    arrays: Arrays | None = None
    samples: int = 0
    length: int | None = None
    preprocess_ms: float = 0.0
    error: InferbusError | None = None
    batch_wait_ms: float | None = None
    form: OutputForm = "list"
    """Outputs go back in the request's form: frame for frame, b64 for b64, else lists."""
    epoch: int = 0
    """The offset tracker's epoch of its partition when it was polled."""
    trace: TraceRef | None = None
    tracestate: bytes | None = None
    spans: RequestSpans | None = None
    indices_unchecked: bool = False
    """Its tensors' token ids and table rows are still to be checked, with the rest of its
    poll (`infra.models.inputs.index_errors`)."""

    @property
    def expired(self) -> bool:
        return self.deadline_s is not None and time.time() >= self.deadline_s


def _float(raw: bytes) -> float | None:
    try:
        return float(raw)
    except ValueError:
        return None


def decode_record(
    record: ConsumerRecord[bytes, bytes],
    *,
    tier: Tier,
    config: ModelConfig,
    tokenize: Tokenize | None,
    max_samples: int,
    index_limits: Mapping[str, int] | None = None,
    served_version: str | None = None,
) -> InHand:
    """Parse and check one record; errors become `InHand.error`, never exceptions. The
    token ids and table rows of a request that passes every other check are left to
    `check_indices`, with the rest of the poll (`index_limits`: for one that does not).
    A request that names a `model_version` other than `served_version` (the version this
    worker runs) is answered `model_not_found`, never run on another version.

    Raises Unparseable only when there is no request id to answer (the caller dead-letters).
    """
    started = time.perf_counter()
    polled_ns = time.time_ns()
    if record.value is None and (lost := unreadable_reason(record.headers)) is not None:
        raise Unparseable(lost)
    try:
        parsed: ParsedRequest | None = parse_request(record.value)
        where = None
    except RejectedEvent as exc:
        parsed, where = None, exc
    item = InHand(
        topic=record.topic,
        partition=record.partition,
        offset=record.offset,
        tier=tier,
        request_id="",
        reply_to="",
        model=config.name,
        tenant=None,
        headers=record.headers,
        record_ts_ms=float(record.timestamp),
        polled_at_s=polled_ns / 1e9,
        polled_ns=polled_ns,
    )
    deadline_header: float | None = None
    for key, value in record.headers or ():
        if key == h.PRODUCED_AT:
            item.produced_ms = _float(value)
        elif key == h.INGEST_MS:
            item.ingest_ms = _float(value)
        elif key == h.DEADLINE:
            deadline_header = _float(value)
        elif key == h.TRACEPARENT:
            item.trace = parse_traceparent(value)
        elif key == h.TRACESTATE:
            item.tracestate = value
    if parsed is None:
        assert where is not None
        salvage = where.salvage
        item.request_id, item.reply_to = salvage.request_id, salvage.reply_to
        item.model, item.tenant = salvage.model or config.name, salvage.tenant
        item.form = "frame" if salvage.framed else "list"
        item.error = InvalidInput(where.message)
    else:
        _fill(
            item,
            parsed,
            config,
            tokenize=tokenize,
            max_samples=max_samples,
            deadline_header=deadline_header,
            index_limits=index_limits,
            served_version=served_version,
        )
    item.preprocess_ms = (time.perf_counter() - started) * 1000
    return item


def check_indices(items: Sequence[InHand], config: ModelConfig, limits: Mapping[str, int]) -> None:
    """Check a poll's decoded tensors' token ids, masks and table rows together; an item
    that fails gets its own error, as `validate_inputs` would give it alone."""
    pending = [
        (item, item.arrays)
        for item in items
        if item.indices_unchecked and item.error is None and item.arrays is not None
    ]
    errors = index_errors([arrays for _, arrays in pending], config, limits)
    for (item, _), error in zip(pending, errors, strict=True):
        item.indices_unchecked = False
        if error is not None:
            item.error = error


def _fill(
    item: InHand,
    parsed: ParsedRequest,
    config: ModelConfig,
    *,
    tokenize: Tokenize | None,
    max_samples: int,
    deadline_header: float | None,
    index_limits: Mapping[str, int] | None,
    served_version: str | None,
) -> None:
    request = parsed.request
    item.request_id, item.reply_to = request.request_id, request.reply_to
    item.model, item.tenant = request.model, request.tenant
    if deadline_header is not None:
        item.deadline_s = deadline_header / 1000
    else:
        deadline = request.effective_deadline_ms(item.record_ts_ms)
        item.deadline_s = deadline / 1000 if deadline is not None else None
    if parsed.framed:
        item.form = "frame"
    elif any(isinstance(t, Tensor) and t.b64 is not None for t in request.inputs.values()):
        item.form = "b64"
    try:
        if request.model != config.name:
            raise InvalidInput(
                f"request for model {request.model!r} reached a worker of {config.name!r}",
                model=request.model,
            )
        wanted = request.model_version
        if wanted is not None and served_version is not None and wanted != served_version:
            raise ModelNotFound(
                f"model {request.model!r} version {wanted!r} is not served by this lane's "
                f"workers (they serve version {served_version!r}); name a served version, "
                "or none for the one in force",
                model=request.model,
            )
        arrays, texts, samples = validate_inputs(
            request,
            config,
            max_tensor_bytes=2**31,
            max_samples=max_samples,
            payload=parsed.payload,
            index_limits=index_limits,
            check_indices=False,
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
        item.indices_unchecked = texts is None
        item.samples = samples
        seq = config.batching.sequence_input
        if seq is not None and seq in arrays and arrays[seq].ndim >= 2:
            item.length = int(arrays[seq].shape[1])
    except InferbusError as exc:
        item.error = exc

"""Ingest's decision for one raw event: route it, answer it with an error, or dead-letter it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from pydantic import ValidationError

from infra.models.config import ModelConfig
from infra.models.inputs import validate_inputs
from schemas import headers as h
from schemas.errors import (
    DeadlineExceeded,
    InferbusError,
    InvalidInput,
    ModelNotFound,
    Overloaded,
    Unauthorized,
    Unparseable,
)
from schemas.request import InferenceRequest
from schemas.result import InferenceResult, Timings, error_result
from schemas.topics import RESULTS, TIERS, is_legal_topic, request_topic
from services.ingest.settings import IngestSettings


class ModelCatalog(Protocol):
    """What ingest needs to know about models and queues."""

    def config(self, name: str) -> ModelConfig:
        """The model's config, or ModelNotFound / ModelConfigError."""
        ...

    def has_version(self, name: str, version: str) -> bool: ...

    def queue_depth(self, topic: str) -> int | None:
        """Unconsumed requests on a tier topic, or None when not known yet."""
        ...


@dataclass(frozen=True)
class Route:
    """A valid request, bound for its tier topic."""

    topic: str
    key: bytes
    value: bytes
    headers: list[tuple[str, bytes]]
    request: InferenceRequest


@dataclass(frozen=True)
class Answer:
    """A terminal error result, bound for the request's reply topic."""

    topic: str
    key: bytes
    result: InferenceResult
    error: InferbusError
    tier: str = "-"
    """The request's tier when it named a valid one (a metrics label), else `-`."""


@dataclass(frozen=True)
class DeadLetter:
    """An event with no request id to answer: its original bytes go to the DLQ."""

    value: bytes
    error: Unparseable


Outcome = Route | Answer | DeadLetter


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def _reply_topic(raw: dict[str, Any]) -> str:
    candidate = raw.get("reply_to")
    return candidate if isinstance(candidate, str) and is_legal_topic(candidate) else RESULTS


def _answer(raw: dict[str, Any], error: InferbusError, ingest_ms: float) -> Answer:
    request_id = str(raw["request_id"])
    model = raw.get("model") if isinstance(raw.get("model"), str) else ""
    tenant = raw.get("tenant") if isinstance(raw.get("tenant"), str) else None
    result = error_result(
        request_id,
        str(model),
        error.status,
        str(error),
        tenant=tenant,
        timings=Timings(ingest_ms=ingest_ms),
        completed_at=datetime.now(UTC),
    )
    tier = raw.get("tier", "interactive")
    return Answer(
        _reply_topic(raw),
        request_id.encode(),
        result,
        error,
        tier=tier if isinstance(tier, str) and tier in TIERS else "-",
    )


def _validation_message(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err["loc"]) or "<event>"
        parts.append(f"{where}: {err['msg']}")
    more = f" (+{exc.error_count() - 5} more)" if exc.error_count() > 5 else ""
    return "; ".join(parts) + more


def _usable_request_id(raw: dict[str, Any]) -> bool:
    rid = raw.get("request_id")
    return isinstance(rid, str) and 0 < len(rid) <= 128


def handle_event(
    value: bytes | None,
    *,
    produced_at: datetime,
    catalog: ModelCatalog,
    settings: IngestSettings,
    now: datetime,
) -> Outcome:
    """Decide what happens to one event; never raises on bad input."""
    started = now
    if value is None:
        return DeadLetter(b"", Unparseable("event has no value (a tombstone?)"))
    try:
        raw = json.loads(value)
    except (ValueError, RecursionError) as exc:
        # ValueError covers JSONDecodeError, UnicodeDecodeError and integers longer than
        # Python's digit limit; RecursionError covers deeply nested arrays. Either would
        # otherwise escape and nack the whole poll forever (a poison pill).
        return DeadLetter(value, Unparseable(f"event is not JSON: {str(exc)[:200]}"))
    if not isinstance(raw, dict):
        return DeadLetter(value, Unparseable(f"event is JSON {type(raw).__name__}, not an object"))
    if not _usable_request_id(raw):
        return DeadLetter(value, Unparseable("event has no usable `request_id` (1-128 chars)"))

    def elapsed_ms() -> float:
        return max((datetime.now(UTC) - started).total_seconds() * 1000, 0.0)

    if len(value) > settings.max_event_bytes:
        error = InvalidInput(
            f"event is {len(value)} bytes; the limit is {settings.max_event_bytes}",
            size=len(value),
        )
        return _answer(raw, error, elapsed_ms())
    try:
        request = InferenceRequest.model_validate(raw)
        route = _route(
            request,
            value,
            produced_at=produced_at,
            catalog=catalog,
            settings=settings,
            now=now,
        )
    except ValidationError as exc:
        return _answer(raw, InvalidInput(_validation_message(exc)), elapsed_ms())
    except InferbusError as exc:
        return _answer(raw, exc, elapsed_ms())
    ingest_ms = elapsed_ms()
    return Route(
        route.topic,
        route.key,
        route.value,
        [*route.headers, (h.INGEST_MS, f"{ingest_ms:.3f}".encode())],
        route.request,
    )


def _route(
    request: InferenceRequest,
    value: bytes,
    *,
    produced_at: datetime,
    catalog: ModelCatalog,
    settings: IngestSettings,
    now: datetime,
) -> Route:
    config = catalog.config(request.model)
    if request.model_version is not None and not catalog.has_version(
        request.model, request.model_version
    ):
        raise ModelNotFound(
            f"model {request.model!r} has no version {request.model_version!r}",
            model=request.model,
        )
    if request.tier not in config.tiers:
        raise InvalidInput(
            f"model {request.model!r} is not served on tier {request.tier!r} "
            f"(tiers: {', '.join(config.tiers)})",
            tier=request.tier,
        )
    if config.allowed_tenants is not None and request.tenant not in config.allowed_tenants:
        raise Unauthorized(
            f"tenant {request.tenant!r} may not call model {request.model!r}",
            tenant=request.tenant,
        )
    validate_inputs(
        request,
        config,
        max_tensor_bytes=settings.max_tensor_bytes,
        max_samples=settings.max_samples_per_request,
    )
    deadline = request.effective_deadline(produced_at)
    if deadline is not None and deadline <= now:
        raise DeadlineExceeded(
            f"deadline {deadline.isoformat()} passed before ingest",
            late_ms=round((now - deadline).total_seconds() * 1000, 1),
        )
    topic = request_topic(request.model, request.tier)
    depth = catalog.queue_depth(topic)
    bound = config.slo_for(request.tier).max_queue
    if depth is not None and depth >= bound:
        raise Overloaded(
            f"tier {request.tier!r} of {request.model!r} has {depth} queued requests, "
            f"over its bound of {bound}; retry later or use another tier",
            tier=request.tier,
            lag=depth,
            bound=bound,
        )
    # The producer's bytes travel on unchanged (no re-encoding on the hot path); what ingest
    # resolved (the absolute deadline, when the request arrived) travels in headers.
    headers: list[tuple[str, bytes]] = [
        (h.CONTENT_TYPE, h.JSON),
        (h.SCHEMA, h.REQUEST_SCHEMA_V1),
        (h.TIER, request.tier.encode()),
        (h.PRODUCED_AT, str(_ms(produced_at)).encode()),
    ]
    if deadline is not None:
        headers.append((h.DEADLINE, str(_ms(deadline)).encode()))
    return Route(topic, request.request_id.encode(), value, headers, request)


def dead_letter_headers(
    error: Unparseable, *, topic: str, partition: int, offset: int
) -> list[tuple[str, bytes]]:
    """Headers of a DLQ record: why, and where the original came from."""
    return h.dead_letter(str(error), topic=topic, partition=partition, offset=offset)

"""Ingest's decision for one raw event: route it, answer it with an error, or dead-letter it."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

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
from schemas.frames import CONTENT_TYPE as FRAME_CONTENT_TYPE
from schemas.parse import (
    ParsedRequest,
    RejectedEvent,
    Salvage,
    parse_request,
    salvage_event,
    split_event,
)
from schemas.request import InferenceRequest
from schemas.result import InferenceResult, Timings, error_result
from schemas.topics import Lane, Tier, ingest_topic, request_topic
from services.ingest.lanes import LaneRouter
from services.ingest.limits import TenantLimiter, bucket_time
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

    def drain_rate(self, topic: str) -> float | None:
        """Requests per second the topic's busy workers get through; None unless the queue
        is growing (then the rate is their capacity, not just the arrivals)."""
        ...


@dataclass(frozen=True, slots=True)
class Route:
    """A valid request, bound for its tier topic with the producer's bytes unchanged."""

    topic: str
    key: bytes
    value: bytes
    headers: list[tuple[str, bytes]]
    request: InferenceRequest


@dataclass(frozen=True, slots=True)
class Answer:
    """A terminal error result, bound for the request's reply topic."""

    topic: str
    key: bytes
    result: InferenceResult
    error: InferbusError
    tier: str = "-"
    """The request's tier when it named a valid one (a metrics label), else `-`."""
    framed: bool = False
    """The request came as a binary frame: the answer goes back as one."""


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """An event with no request id to answer: its original bytes go to the DLQ."""

    value: bytes
    error: InferbusError
    code: h.DeadLetterCode = "unparseable"


Outcome = Route | Answer | DeadLetter
MIN_DRAIN_RPS = 1.0
"""Below this drain rate the wait estimate is not trusted."""


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def arrival(record_ms: int, now: datetime) -> datetime:
    """When an event counts as arrived: its Kafka record's timestamp (the producer's
    CreateTime unless the topic keeps LogAppendTime), but never after ingest's clock.

    A future timestamp would push a `timeout_ms` deadline out and hide how far behind
    ingest is; a past one is kept, since a record that waited in the topic did wait and
    ingest cannot tell a back-dated one (README: producers that forward an event's own
    time set `created_at`). A record without a timestamp (-1) arrived now.
    """
    if record_ms < 0 or record_ms >= now.timestamp() * 1000:
        return now
    return datetime.fromtimestamp(record_ms / 1000, UTC)


def answer(where: Salvage, error: InferbusError, ingest_ms: float) -> Answer:
    """The error result for an event, sent where its salvaged fields say."""
    result = error_result(
        where.request_id,
        where.model,
        error.status,
        str(error),
        tenant=where.tenant,
        timings=Timings(ingest_ms=ingest_ms),
        completed_at=datetime.now(UTC),
    )
    return Answer(
        where.reply_to,
        where.request_id.encode(),
        result,
        error,
        tier=where.tier,
        framed=where.framed,
    )


def _salvage_request(parsed: ParsedRequest) -> Salvage:
    request = parsed.request
    return Salvage(
        request_id=request.request_id,
        reply_to=request.reply_to,
        model=request.model,
        tenant=request.tenant,
        tier=request.tier,
        framed=parsed.framed,
    )


LIMIT_SETTINGS = {
    "max_tensor_bytes": "INFERBUS_INGEST_MAX_TENSOR_BYTES",
    "max_samples": "INFERBUS_INGEST_MAX_SAMPLES_PER_REQUEST",
}
"""The settings behind ingest's limits, named in the answers of requests over them."""


def handle_event(
    value: bytes | None,
    *,
    produced_at: datetime,
    catalog: ModelCatalog,
    settings: IngestSettings,
    now: datetime,
    limiter: TenantLimiter | None = None,
    sent_to_tier: Tier | None = None,
    router: LaneRouter | None = None,
) -> Outcome:
    """Decide what happens to one event; never raises on bad input.

    `limiter` holds this ingest instance's per-tenant token buckets (None: no limits).
    `router` splits models with a canary rollout (None: every request goes stable).
    `sent_to_tier`: the tier of the per-tier ingest topic the event came on (None: the
    shared topic); a request that names no tier takes it, one that names another is refused.
    """
    started = now

    def elapsed_ms() -> float:
        return max((datetime.now(UTC) - started).total_seconds() * 1000, 0.0)

    try:
        if value is not None and len(value) > settings.max_event_bytes:
            envelope, payload = split_event(value)
            error = InvalidInput(
                f"event is {len(value)} bytes; the limit is {settings.max_event_bytes} "
                "(INFERBUS_INGEST_MAX_EVENT_BYTES)",
                size=len(value),
            )
            return answer(
                salvage_event(envelope, payload),
                error,
                elapsed_ms(),
            )
        parsed = parse_request(value)
    except Unparseable as exc:
        return DeadLetter(value or b"", exc)
    except RejectedEvent as exc:
        return answer(exc.salvage, InvalidInput(exc.message), elapsed_ms())
    try:
        if sent_to_tier is not None:
            parsed = _on_tier_topic(parsed, sent_to_tier)
        route = _route(
            parsed,
            value or b"",
            produced_at=produced_at,
            catalog=catalog,
            settings=settings,
            now=now,
            limiter=limiter,
            router=router,
        )
    except InferbusError as exc:
        return answer(_salvage_request(parsed), exc, elapsed_ms())
    route.headers.append((h.INGEST_MS, f"{elapsed_ms():.3f}".encode()))
    return route


def failed_event(value: bytes | None, exc: Exception, *, elapsed_ms: float) -> Answer | DeadLetter:
    """What ingest sends for an event whose handling raised (a defect in ingest, not in
    the event): `internal_error` to its reply topic when its envelope names a request id,
    else its bytes to the DLQ with code `internal_error`. Either way the event is answered."""
    error = InferbusError(f"ingest failed while handling this event: {type(exc).__name__}: {exc}")
    try:
        envelope, payload = split_event(value)
        where = salvage_event(envelope, payload)
    except Exception:  # nothing to answer to: the DLQ takes it, with the first error's reason
        return DeadLetter(value or b"", error, code="internal_error")
    return answer(where, error, elapsed_ms)


def _on_tier_topic(parsed: ParsedRequest, tier: Tier) -> ParsedRequest:
    """The request as sent to `tier`'s ingest topic: its tier is the topic's."""
    request = parsed.request
    if request.tier == tier:
        return parsed
    if "tier" in request.model_fields_set:
        raise InvalidInput(
            f"request says tier {request.tier!r} but was sent to {ingest_topic(tier)!r}; "
            f"send it to {ingest_topic(request.tier)!r}, or leave the tier out",
            tier=request.tier,
        )
    return dataclasses.replace(parsed, request=request.model_copy(update={"tier": tier}))


def _route(
    parsed: ParsedRequest,
    value: bytes,
    *,
    produced_at: datetime,
    catalog: ModelCatalog,
    settings: IngestSettings,
    now: datetime,
    limiter: TenantLimiter | None = None,
    router: LaneRouter | None = None,
) -> Route:
    request = parsed.request
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
            f"(tiers: {', '.join(config.tiers) or 'none'})",
            tier=request.tier,
        )
    if config.allowed_tenants is not None and request.tenant not in config.allowed_tenants:
        raise Unauthorized(
            f"tenant {request.tenant!r} may not call model {request.model!r}",
            tenant=request.tenant,
        )
    if limiter is not None and limiter.active:  # no per-request work when nobody has a limit
        _check_tenant_rate(limiter, request.tenant, bucket_time(produced_at, now))
    validate_inputs(
        request,
        config,
        max_tensor_bytes=settings.max_tensor_bytes,
        max_samples=settings.max_samples_per_request,
        payload=parsed.payload,
        limit_settings=LIMIT_SETTINGS,
    )
    deadline = request.effective_deadline(produced_at)
    if deadline is not None and deadline <= now:
        raise DeadlineExceeded(
            f"deadline {deadline.isoformat()} passed before ingest",
            late_ms=round((now - deadline).total_seconds() * 1000, 1),
        )
    waited_ms = (now - produced_at).total_seconds() * 1000
    if request.tier == "batch" and waited_ms > settings.shed_batch_after_ms:
        raise Overloaded(
            f"ingest is {waited_ms:.0f} ms behind: the request reached it that long after "
            f"its record's timestamp (bound {settings.shed_batch_after_ms:.0f} ms); batch "
            "requests are shed first so critical and interactive ones go on; retry later "
            "(a producer that stamps records with an older time of its own sets created_at "
            "instead)",
            tier=request.tier,
            behind_ms=round(waited_ms),
        )
    lane: Lane = "stable" if router is None else router.lane(request, config, request.tier)
    topic = request_topic(request.model, request.tier, lane)
    _check_queue(
        topic,
        request,
        config,
        catalog,
        deadline=deadline,
        now=now,
        wait_share=settings.admit_wait_share,
    )
    # The producer's bytes travel on unchanged (no re-encoding on the hot path); what ingest
    # resolved (the absolute deadline, when the request arrived) travels in headers.
    headers: list[tuple[str, bytes]] = [
        (h.CONTENT_TYPE, FRAME_CONTENT_TYPE if parsed.framed else h.JSON),
        (h.SCHEMA, h.REQUEST_SCHEMA_V1),
        (h.TIER, request.tier.encode()),
        (h.PRODUCED_AT, str(_ms(produced_at)).encode()),
    ]
    if deadline is not None:
        headers.append((h.DEADLINE, str(_ms(deadline)).encode()))
    return Route(topic, request.request_id.encode(), value, headers, request)


def _check_tenant_rate(limiter: TenantLimiter, tenant: str | None, at: datetime) -> None:
    """Overloaded when the tenant's token bucket is empty at `at` (`bucket_time`)."""
    verdict = limiter.admit(tenant, at)
    if verdict is None or verdict.allowed:
        return
    limit = verdict.limit
    raise Overloaded(
        f"tenant {verdict.tenant!r} is over its rate limit of {limit.rate_rps:g} requests/s "
        f"(burst {limit.capacity:g}) at this ingest instance; slow down and retry, or ask "
        "for a higher limit (INFERBUS_INGEST_TENANT_LIMITS)",
        tenant=verdict.tenant,
        limit_rps=limit.rate_rps,
        burst=limit.capacity,
    )


def _check_queue(
    topic: str,
    request: InferenceRequest,
    config: ModelConfig,
    catalog: ModelCatalog,
    *,
    deadline: datetime | None,
    now: datetime,
    wait_share: float = 1.0,
) -> None:
    """Overloaded when the tier queue is over its bound, or the wait it predicts would
    outlast `wait_share` of the time left before the request's deadline: such a request
    would likely expire in the queue (the prediction is a few hundred ms old and the
    drain rate moves, hence the share)."""
    depth = catalog.queue_depth(topic)
    if depth is None:
        return
    slo = config.slo_for(request.tier)
    if depth >= slo.max_queue:
        raise Overloaded(
            f"tier {request.tier!r} of {request.model!r} has {depth} queued requests, "
            f"over its bound of {slo.max_queue}; retry later or use another tier",
            tier=request.tier,
            lag=depth,
            bound=slo.max_queue,
        )
    rate = catalog.drain_rate(topic)
    if deadline is None or rate is None or rate < MIN_DRAIN_RPS or depth == 0:
        # Workers that serve next to nothing are not working the queue (none there yet, a
        # broker coming back): the queue bound decides, not a rate that says nothing.
        return
    # The drain rate is the workers' capacity only while the queue grows (they are busy);
    # QueueDepths reports none otherwise, so an idle group never rejects on it.
    wait_ms = depth / rate * 1000
    left_ms = (deadline - now).total_seconds() * 1000
    if wait_ms > left_ms * wait_share:
        raise Overloaded(
            f"tier {request.tier!r} of {request.model!r} would make this request wait "
            f"~{wait_ms:.0f} ms ({depth} queued, served at {rate:.0f}/s), over "
            f"{wait_share:.0%} of the {left_ms:.0f} ms left before its deadline; retry later "
            "or use another tier",
            tier=request.tier,
            lag=depth,
            wait_ms=round(wait_ms),
        )


def dead_letter_headers(
    dead: DeadLetter,
    *,
    topic: str,
    partition: int,
    offset: int,
    original: Sequence[tuple[str, bytes]] = (),
) -> list[tuple[str, bytes]]:
    """Headers of a DLQ record: the original's own, why, and where it came from."""
    return h.dead_letter(
        str(dead.error),
        topic=topic,
        partition=partition,
        offset=offset,
        code=dead.code,
        original=original,
    )

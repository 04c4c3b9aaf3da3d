"""W3C trace context over Kafka headers, and spans named by the OTel messaging conventions."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Literal

from aiokafka.structs import RecordMetadata
from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.propagators.textmap import Getter, Setter
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
)
from opentelemetry.util.types import AttributeValue

from schemas.headers import Headers
from tracing import attributes as attr
from tracing.attributes import RequestAttrs, Stage
from tracing.setup import get_tracer

Parent = Span | SpanContext | Context
"""Where a span hangs: a live span, a span context (e.g. from a link) or a context."""
EngineStep = Literal["preprocess", "run", "postprocess"]
_ENGINE_STAGES: dict[EngineStep, Stage] = {
    "preprocess": "preprocess",
    "run": "infer",
    "postprocess": "postprocess",
}


class _HeaderGetter(Getter[Sequence[tuple[str, bytes]]]):
    def get(self, carrier: Sequence[tuple[str, bytes]], key: str) -> list[str] | None:
        values = [raw.decode("utf-8", "replace") for k, raw in carrier if k == key and raw]
        # Kafka allows repeated keys; the last one written wins, as in schemas.headers.header.
        return values[-1:] or None

    def keys(self, carrier: Sequence[tuple[str, bytes]]) -> list[str]:
        return [k for k, _ in carrier]


class _HeaderSetter(Setter[Headers]):
    def set(self, carrier: Headers, key: str, value: str) -> None:
        carrier[:] = [(k, v) for k, v in carrier if k != key]
        carrier.append((key, value.encode()))


_GETTER = _HeaderGetter()
_SETTER = _HeaderSetter()


def inject(headers: Headers, context: Context | None = None) -> Headers:
    """Write `traceparent`/`tracestate` (replacing any) for `context` (default: current); returns
    `headers`, changed in place."""
    propagate.inject(headers, context=context, setter=_SETTER)
    return headers


def extract(headers: Sequence[tuple[str, bytes]] | None) -> Context:
    """The trace context a record carries; an empty context (a new root) when it has none."""
    return propagate.extract(headers or [], context=Context(), getter=_GETTER)


def kafka_timestamp_ns(timestamp_ms: int | float) -> int:
    """A Kafka record timestamp (epoch ms) as span time (epoch ns)."""
    return int(timestamp_ms * 1_000_000)


def _context(parent: Parent | None) -> Context | None:
    if parent is None or isinstance(parent, Context):
        return parent
    if isinstance(parent, SpanContext):
        parent = NonRecordingSpan(parent)
    return trace.set_span_in_context(parent, Context())


def _span_context(item: Parent) -> SpanContext:
    if isinstance(item, SpanContext):
        return item
    if isinstance(item, Context):
        return trace.get_current_span(item).get_span_context()
    return item.get_span_context()


def _links(items: Sequence[Parent | Link]) -> list[Link]:
    links = [item if isinstance(item, Link) else Link(_span_context(item)) for item in items]
    return [link for link in links if link.context.is_valid]


def _base(
    request: RequestAttrs | None,
    stage: Stage | None,
    extra: Mapping[str, AttributeValue] | None,
) -> dict[str, AttributeValue]:
    out: dict[str, AttributeValue] = request.as_attributes() if request else {}
    if stage is not None:
        out[attr.STAGE] = stage
    if extra:
        out.update(extra)
    return out


def _key(key: str | bytes | None) -> dict[str, AttributeValue]:
    if key is None:
        return {}
    text = key.decode("utf-8", "replace") if isinstance(key, bytes) else key
    return {attr.MESSAGING_KEY: text}


def record_error(span: Span, error: BaseException | str, *, message: str | None = None) -> None:
    """Mark `span` failed with `error.type`: an exception's class or a named code.

    An exception's message is not recorded: it can quote inputs (pydantic's does). Pass
    `message` only when it is known to hold none.
    """
    if isinstance(error, BaseException):
        kind = type(error)
        error_type = f"{kind.__module__}.{kind.__qualname__}".removeprefix("builtins.")
    else:
        error_type = error
    span.set_attribute(attr.ERROR_TYPE, error_type)
    span.set_status(Status(StatusCode.ERROR, message or error_type))


@contextmanager
def _current(
    name: str,
    *,
    kind: SpanKind,
    context: Context | None,
    attributes: Mapping[str, AttributeValue],
    links: Sequence[Link] = (),
    start_ns: int | None = None,
) -> Iterator[Span]:
    with get_tracer().start_as_current_span(
        name,
        context=context,
        kind=kind,
        attributes=attributes,
        links=links,
        start_time=start_ns,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield span
        except Exception as exc:
            record_error(span, exc)
            raise


def _send_attributes(
    topic: str,
    key: str | bytes | None,
    partition: int | None,
    request: RequestAttrs | None,
    stage: Stage | None,
) -> dict[str, AttributeValue]:
    attributes = {
        attr.MESSAGING_SYSTEM: "kafka",
        attr.MESSAGING_OPERATION_TYPE: "send",
        attr.MESSAGING_OPERATION_NAME: "send",
        attr.MESSAGING_DESTINATION: topic,
        **_key(key),
        **_base(request, stage, None),
    }
    if partition is not None:
        attributes[attr.MESSAGING_PARTITION] = str(partition)
    return attributes


@contextmanager
def send_span(
    topic: str,
    *,
    key: str | bytes | None = None,
    partition: int | None = None,
    request: RequestAttrs | None = None,
    stage: Stage | None = None,
    context: Context | None = None,
) -> Iterator[Span]:
    """PRODUCER span `send <topic>`, current while open: `inject(headers)` inside it.

    Set the partition and offset the broker assigned with `set_delivery`.
    """
    attributes = _send_attributes(topic, key, partition, request, stage)
    with _current(
        f"send {topic}", kind=SpanKind.PRODUCER, context=context, attributes=attributes
    ) as span:
        yield span


def start_send_span(
    topic: str,
    *,
    key: str | bytes | None = None,
    request: RequestAttrs | None = None,
    stage: Stage | None = None,
    parent: Parent | None = None,
) -> Span:
    """`send <topic>` started but not made current: inject with
    `inject(headers, trace.set_span_in_context(span))`, end it after the broker's ack."""
    return get_tracer().start_span(
        f"send {topic}",
        context=_context(parent),
        kind=SpanKind.PRODUCER,
        attributes=_send_attributes(topic, key, None, request, stage),
    )


def set_delivery(span: Span, *, partition: int, offset: int | None = None) -> None:
    """Record where the broker put a sent record."""
    span.set_attribute(attr.MESSAGING_PARTITION, str(partition))
    if offset is not None:
        span.set_attribute(attr.MESSAGING_OFFSET, offset)


def end_send(span: Span, ack: RecordMetadata | BaseException) -> None:
    """Close a send span with the broker's ack (where the record went) or the failure."""
    if isinstance(ack, BaseException):
        record_error(span, ack)
    else:
        set_delivery(span, partition=ack.partition, offset=ack.offset)
    span.end()


def _process_attributes(
    topic: str,
    *,
    group: str,
    partition: int,
    offset: int,
    key: str | bytes | None,
    request: RequestAttrs | None,
    stage: Stage | None,
) -> dict[str, AttributeValue]:
    return {
        attr.MESSAGING_SYSTEM: "kafka",
        attr.MESSAGING_OPERATION_TYPE: "process",
        attr.MESSAGING_OPERATION_NAME: "process",
        attr.MESSAGING_DESTINATION: topic,
        attr.MESSAGING_GROUP: group,
        attr.MESSAGING_PARTITION: str(partition),
        attr.MESSAGING_OFFSET: offset,
        **_key(key),
        **_base(request, stage, None),
    }


@contextmanager
def process_span(
    topic: str,
    *,
    group: str,
    partition: int,
    offset: int,
    key: str | bytes | None = None,
    context: Context | None = None,
    links: Sequence[Parent | Link] = (),
    request: RequestAttrs | None = None,
    stage: Stage | None = None,
) -> Iterator[Span]:
    """CONSUMER span `process <topic>` for one record; `context` is `extract(record.headers)`."""
    attributes = _process_attributes(
        topic,
        group=group,
        partition=partition,
        offset=offset,
        key=key,
        request=request,
        stage=stage,
    )
    with _current(
        f"process {topic}",
        kind=SpanKind.CONSUMER,
        context=context if context is not None else Context(),
        attributes=attributes,
        links=_links(links),
    ) as span:
        yield span


def start_process_span(
    topic: str,
    *,
    group: str,
    partition: int,
    offset: int,
    key: str | bytes | None = None,
    context: Context | None = None,
    request: RequestAttrs | None = None,
    stage: Stage | None = None,
    start_ns: int | None = None,
) -> Span:
    """`process <topic>` started but not made current, for a consumer that answers records
    out of order (the worker); the caller ends it when the record is answered.

    `start_ns` (epoch ns, default now): when processing began, e.g. the poll, so that spans
    timed from the poll (`batch.wait`) lie inside it."""
    return get_tracer().start_span(
        f"process {topic}",
        context=context if context is not None else Context(),
        kind=SpanKind.CONSUMER,
        attributes=_process_attributes(
            topic,
            group=group,
            partition=partition,
            offset=offset,
            key=key,
            request=request,
            stage=stage,
        ),
        start_time=start_ns,
    )


@contextmanager
def stage_span(
    name: str,
    *,
    stage: Stage | None = None,
    parent: Parent | None = None,
    request: RequestAttrs | None = None,
    attributes: Mapping[str, AttributeValue] | None = None,
) -> Iterator[Span]:
    """INTERNAL span under `parent` (default: the current span), current while open."""
    with _current(
        name,
        kind=SpanKind.INTERNAL,
        context=_context(parent),
        attributes=_base(request, stage, attributes),
    ) as span:
        yield span


def timed_span(
    name: str,
    *,
    start_ns: int,
    end_ns: int,
    stage: Stage | None = None,
    parent: Parent | None = None,
    request: RequestAttrs | None = None,
    links: Sequence[Parent | Link] = (),
    attributes: Mapping[str, AttributeValue] | None = None,
) -> SpanContext:
    """An INTERNAL span already over, from `start_ns` to `end_ns` (epoch ns), e.g. `queue`.

    An end before the start (clocks of two hosts) is clamped to a zero-length span.
    """
    span = get_tracer().start_span(
        name,
        context=_context(parent),
        kind=SpanKind.INTERNAL,
        attributes=_base(request, stage, attributes),
        links=_links(links),
        start_time=start_ns,
    )
    span.end(end_time=max(start_ns, end_ns))
    return span.get_span_context()


class BatchSpan:
    """The open `infer` span of one batch; engine steps hang under it from any thread."""

    def __init__(self, span: Span, request: RequestAttrs, size: int) -> None:
        self.span = span
        self._request = request
        self._size = size

    def _attributes(self, step: EngineStep) -> dict[str, AttributeValue]:
        return _base(self._request, _ENGINE_STAGES[step], {attr.REQUEST_COUNT: self._size})

    @contextmanager
    def step(self, step: EngineStep) -> Iterator[Span]:
        """Span `preprocess`/`run`/`postprocess` (stages preprocess/infer/postprocess)."""
        with _current(
            step,
            kind=SpanKind.INTERNAL,
            context=_context(self.span),
            attributes=self._attributes(step),
        ) as span:
            yield span

    def timed_step(self, step: EngineStep, *, start_ns: int, end_ns: int) -> SpanContext:
        """The same span from timestamps the engine measured itself."""
        return timed_span(
            step,
            start_ns=start_ns,
            end_ns=end_ns,
            parent=self.span,
            attributes=self._attributes(step),
        )


@contextmanager
def infer_span(
    requests: Sequence[Parent],
    *,
    request: RequestAttrs,
    parent: Parent | None = None,
    start_ns: int | None = None,
    size: int | None = None,
) -> Iterator[BatchSpan]:
    """Batch-level `infer` span that links to every (traced) request in the batch.

    `start_ns`: when the engine really started (a batch may queue behind another).

    `requests`: each request's span or context (the worker's `process` span). `request`:
    the batch's shared attributes (model, tier, version, provider, batch_id); batch size
    is `size`, default `len(requests)` (a batch of partly sampled requests links fewer).
    Parent: `parent`, else the first request, so that a batch of one reads as one trace;
    the other requests reach it through their links.
    """
    if not requests:
        raise ValueError("a batch needs at least one request")
    size = len(requests) if size is None else size
    shared = RequestAttrs(
        model=request.model,
        tier=request.tier,
        model_version=request.model_version,
        provider=request.provider,
        batch_size=size,
        batch_id=request.batch_id,
    )
    with _current(
        "infer",
        kind=SpanKind.INTERNAL,
        context=_context(parent if parent is not None else requests[0]),
        attributes=_base(shared, None, {attr.MESSAGING_BATCH_COUNT: size}),
        links=_links(requests),
        start_ns=start_ns,
    ) as span:
        yield BatchSpan(span, shared, size)

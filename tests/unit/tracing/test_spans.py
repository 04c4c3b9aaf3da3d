"""Span structure, propagation over Kafka headers, sampling and exporter choice."""

from __future__ import annotations

import io

import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as Grpc
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as Http
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from rich.console import Console
from rich.live import Live

from schemas.headers import TRACEPARENT, header
from tracing.attributes import RequestAttrs
from tracing.kafka import (
    extract,
    infer_span,
    inject,
    kafka_timestamp_ns,
    process_span,
    record_error,
    send_span,
    set_delivery,
    stage_span,
    timed_span,
)
from tracing.setup import (
    TracingConfigError,
    build_tracer_provider,
    exporters_from_env,
    init_tracing,
    sampler_from_env,
)

UPSTREAM = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
UNSAMPLED = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
REQ = RequestAttrs(model="demo-mlp", tier="interactive", request_id="r-1", model_version="1")


def by_name(spans: tuple[ReadableSpan, ...]) -> dict[str, ReadableSpan]:
    return {s.name: s for s in spans}


def test_init_tracing_is_built_once() -> None:
    # The provider is per process: whichever test ran first built it (the integration
    # suite may have, in the same pytest process); later calls must not replace it.
    first = init_tracing("inferbus-test", instance_id="test-1")
    assert init_tracing("other", instance_id="other") is first
    assert first.resource.attributes["service.instance.id"] != "other"
    assert first.resource.attributes["service.name"] != "other"


def test_propagation_round_trip_replaces_old_headers(spans: InMemorySpanExporter) -> None:
    headers = [("content-type", b"application/json"), (TRACEPARENT, b"stale")]
    with send_span("t", key="r-1") as span:
        inject(headers)
    assert [k for k, _ in headers].count(TRACEPARENT) == 1
    remote = trace.get_current_span(extract(headers)).get_span_context()
    assert remote.trace_id == span.get_span_context().trace_id
    assert remote.span_id == span.get_span_context().span_id
    assert remote.is_remote


def test_extract_without_headers_is_a_new_root() -> None:
    assert not trace.get_current_span(extract(None)).get_span_context().is_valid


def test_request_path_structure(spans: InMemorySpanExporter) -> None:
    """upstream → ingest process → send tier → worker process/queue/batch.wait → infer → result."""
    upstream = [(TRACEPARENT, UPSTREAM.encode())]
    tier_headers: list[tuple[str, bytes]] = []
    with (
        process_span(
            "inferbus.ingest",
            group="inferbus.ingest",
            partition=0,
            offset=7,
            key="r-1",
            context=extract(upstream),
            request=REQ,
            stage="ingest",
        ),
        send_span("inferbus.req.demo-mlp.interactive", key="r-1", request=REQ) as sent,
    ):
        inject(tier_headers)
        set_delivery(sent, partition=3, offset=42)
    ctx = extract(tier_headers)
    timed_span(
        "queue",
        start_ns=kafka_timestamp_ns(1_000),
        end_ns=kafka_timestamp_ns(1_005),
        stage="queue",
        parent=ctx,
        request=REQ,
    )
    with process_span(
        "inferbus.req.demo-mlp.interactive",
        group="inferbus.workers.demo-mlp.interactive",
        partition=3,
        offset=42,
        context=ctx,
        request=REQ,
    ) as worker:
        timed_span("batch.wait", start_ns=10, end_ns=20, stage="batch_wait", parent=worker)
        other = trace.get_current_span(extract([(TRACEPARENT, UPSTREAM[:-2].encode() + b"01")]))
        batch_req = RequestAttrs(
            model="demo-mlp", tier="interactive", provider="cpu", batch_id="b1"
        )
        with infer_span([worker, other.get_span_context()], request=batch_req) as batch:
            with batch.step("preprocess"):
                pass
            with batch.step("run"):
                pass
            batch.timed_step("postprocess", start_ns=100, end_ns=200)
        with send_span("inferbus.results", key="r-1", request=REQ, stage="publish"):
            pass

    got = by_name(spans.get_finished_spans())
    trace_id = int(UPSTREAM.split("-")[1], 16)
    assert {s.context.trace_id for s in got.values()} == {trace_id}

    ingest = got["process inferbus.ingest"]
    assert ingest.kind is SpanKind.CONSUMER
    assert ingest.parent is not None and ingest.parent.span_id == int("b7ad6b7169203331", 16)
    assert ingest.attributes is not None
    assert dict(ingest.attributes) == {
        "messaging.system": "kafka",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": "inferbus.ingest",
        "messaging.consumer.group.name": "inferbus.ingest",
        "messaging.destination.partition.id": "0",
        "messaging.kafka.offset": 7,
        "messaging.kafka.message.key": "r-1",
        "inferbus.model": "demo-mlp",
        "inferbus.tier": "interactive",
        "inferbus.model_version": "1",
        "inferbus.request_id": "r-1",
        "inferbus.stage": "ingest",
    }
    send = got["send inferbus.req.demo-mlp.interactive"]
    assert send.kind is SpanKind.PRODUCER
    assert send.parent is not None and send.parent.span_id == ingest.context.span_id
    assert send.attributes is not None
    assert send.attributes["messaging.operation.type"] == "send"
    assert send.attributes["messaging.destination.partition.id"] == "3"
    assert send.attributes["messaging.kafka.offset"] == 42

    worker_span = got["process inferbus.req.demo-mlp.interactive"]
    assert worker_span.parent is not None and worker_span.parent.span_id == send.context.span_id
    assert got["queue"].parent is not None
    assert got["queue"].parent.span_id == send.context.span_id
    assert got["queue"].end_time - got["queue"].start_time == 5_000_000  # type: ignore[operator]
    assert got["batch.wait"].parent.span_id == worker_span.context.span_id  # type: ignore[union-attr]

    infer = got["infer"]
    assert infer.parent is not None and infer.parent.span_id == worker_span.context.span_id
    assert [link.context.span_id for link in infer.links] == [
        worker_span.context.span_id,
        int("b7ad6b7169203331", 16),
    ]
    assert infer.attributes is not None
    assert infer.attributes["messaging.batch.message_count"] == 2
    assert infer.attributes["inferbus.batch_size"] == 2
    assert infer.attributes["inferbus.provider"] == "cpu"
    assert "inferbus.stage" not in infer.attributes
    for step, stage in [
        ("preprocess", "preprocess"),
        ("run", "infer"),
        ("postprocess", "postprocess"),
    ]:
        child = got[step]
        assert child.parent is not None and child.parent.span_id == infer.context.span_id
        assert child.attributes is not None
        assert child.attributes["inferbus.stage"] == stage
        assert child.attributes["inferbus.request_count"] == 2
    publish = got["send inferbus.results"]
    assert publish.parent is not None and publish.parent.span_id == worker_span.context.span_id
    assert publish.attributes is not None and publish.attributes["inferbus.stage"] == "publish"


def test_errors_set_status_and_type_without_the_message(spans: InMemorySpanExporter) -> None:
    secret = "input_value=[1.0, 2.0]"
    with pytest.raises(ValueError), stage_span("validate", request=REQ):
        raise ValueError(secret)
    with stage_span("route") as span:
        record_error(span, "model_not_found")
    got = by_name(spans.get_finished_spans())
    for name, error_type in [("validate", "ValueError"), ("route", "model_not_found")]:
        ended = got[name]
        assert ended.status.status_code is StatusCode.ERROR
        assert ended.attributes is not None and ended.attributes["error.type"] == error_type
        assert not ended.events
        assert secret not in ended.to_json()


def test_timed_span_clamps_a_clock_skew(spans: InMemorySpanExporter) -> None:
    timed_span("queue", start_ns=2_000, end_ns=1_000)
    (span,) = spans.get_finished_spans()
    assert span.start_time == span.end_time == 2_000


def test_infer_span_needs_requests() -> None:
    with pytest.raises(ValueError), infer_span([], request=REQ):
        pass


def _provider(env: dict[str, str]) -> tuple[trace.Tracer, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = build_tracer_provider(
        "svc", instance_id="i", env=env, extra_processors=(SimpleSpanProcessor(exporter),)
    )
    return provider.get_tracer("t"), exporter


@pytest.mark.parametrize(
    ("env", "traceparent", "exported"),
    [
        pytest.param({"OTEL_TRACES_SAMPLER_ARG": "0"}, UPSTREAM, True, id="ratio0-sampled-parent"),
        pytest.param({"OTEL_TRACES_SAMPLER_ARG": "0"}, None, False, id="ratio0-root"),
        pytest.param(
            {"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0"},
            UPSTREAM,
            True,
            id="plain-ratio-still-parent-based",
        ),
        pytest.param({"OTEL_TRACES_SAMPLER": "always_off"}, UPSTREAM, True, id="off-continues"),
        pytest.param({}, UNSAMPLED, False, id="unsampled-parent-respected"),
        pytest.param({}, None, True, id="default-samples-all"),
    ],
)
def test_sampling(env: dict[str, str], traceparent: str | None, exported: bool) -> None:
    tracer, exporter = _provider(env)
    headers = [(TRACEPARENT, traceparent.encode())] if traceparent else []
    stage = {"inferbus.stage": "queue", "inferbus.model": "m", "inferbus.tier": "batch"}
    with tracer.start_as_current_span("process t", context=extract(headers)) as span:
        out: list[tuple[str, bytes]] = []
        inject(out)
        with tracer.start_as_current_span("queue", attributes=stage):
            pass
    assert bool(exporter.get_finished_spans()) is exported
    if traceparent:
        assert span.get_span_context().trace_id == int(traceparent.split("-")[1], 16)
    flags = header(out, TRACEPARENT)
    assert flags is not None
    assert bool(int(flags.rsplit("-", 1)[1], 16) & 1) is exported


@pytest.mark.parametrize(
    ("env", "message"),
    [
        pytest.param({"OTEL_TRACES_SAMPLER": "jaeger_remote"}, "not supported", id="name"),
        pytest.param({"OTEL_TRACES_SAMPLER_ARG": "x"}, "not a number", id="arg"),
        pytest.param({"OTEL_TRACES_SAMPLER_ARG": "2"}, "within", id="range"),
    ],
)
def test_sampler_config_errors(env: dict[str, str], message: str) -> None:
    with pytest.raises(TracingConfigError, match=message):
        sampler_from_env(env)


@pytest.mark.parametrize(
    ("env", "kinds"),
    [
        pytest.param({}, [], id="unset-no-export"),
        pytest.param({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, [Http], id="http-default"),
        pytest.param(
            {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"},
            [Http],
            id="traces-endpoint",
        ),
        pytest.param(
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
            [Grpc],
            id="grpc",
        ),
        pytest.param(
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"},
            [],
            id="exporter-none",
        ),
        pytest.param(
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"},
            [],
            id="sdk-disabled",
        ),
    ],
)
def test_exporters_from_env(env: dict[str, str], kinds: list[type]) -> None:
    exporters = exporters_from_env(env)
    assert [type(e) for e in exporters] == kinds
    for exporter in exporters:
        exporter.shutdown()


def test_http_exporter_gets_the_signal_path() -> None:
    (exporter,) = exporters_from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/"})
    assert isinstance(exporter, Http)
    assert "http://c:4318/v1/traces" in repr(vars(exporter))
    exporter.shutdown()  # type: ignore[no-untyped-call]


def test_unsupported_protocol_is_a_config_error() -> None:
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}
    with pytest.raises(TracingConfigError, match="http/json"):
        exporters_from_env(env)


def test_console_spans_print_above_the_live_view() -> None:
    # `inferbus up`'s live view swaps sys.stdout for a proxy that prints above its table;
    # spans written past it, to the stdout of the SDK's import, broke the table's lines.
    (exporter,) = exporters_from_env({"OTEL_TRACES_EXPORTER": "console"})
    provider = build_tracer_provider("t", instance_id="i")
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    screen = io.StringIO()
    console = Console(file=screen, force_terminal=True, width=80)
    with Live("the table", console=console, redirect_stdout=True):
        provider.get_tracer("t").start_span("during-live").end()
    provider.shutdown()
    assert "during-live" in screen.getvalue()

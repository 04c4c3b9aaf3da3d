"""One TracerProvider per process: resource, sampler, optional OTLP export, stage breakdown."""

from __future__ import annotations

import io
import logging
import os
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import IO, cast

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import SERVICE_INSTANCE_ID, SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
)
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_OFF,
    ALWAYS_ON,
    ParentBased,
    Sampler,
    TraceIdRatioBased,
)
from opentelemetry.trace import Tracer

from schemas.errors import InferbusError
from tracing.breakdown import default_breakdown
from tracing.metrics import observe_stage

log = logging.getLogger(__name__)

TRACER_NAME = "inferbus"


class TracingConfigError(InferbusError):
    """An OTEL_* variable asks for something this process cannot do."""


def sampler_from_env(env: Mapping[str, str], default_ratio: float = 1.0) -> Sampler:
    """`OTEL_TRACES_SAMPLER`/`_ARG`, always parent-based so a sampled upstream trace continues.

    A non-parent-based choice (`traceidratio`, `always_off`, ...) becomes the root sampler
    of a ParentBased one; without the variable, `parentbased_traceidratio(default_ratio)`.
    """
    name = env.get("OTEL_TRACES_SAMPLER", "").strip().lower() or "parentbased_traceidratio"
    arg = env.get("OTEL_TRACES_SAMPLER_ARG", "").strip()
    ratio = default_ratio if "OTEL_TRACES_SAMPLER" not in env else 1.0
    if arg:
        try:
            ratio = float(arg)
        except ValueError as exc:
            raise TracingConfigError(f"OTEL_TRACES_SAMPLER_ARG={arg!r} is not a number") from exc
    if not 0.0 <= ratio <= 1.0:
        raise TracingConfigError(f"sampling ratio must be within [0, 1], got {ratio}")
    roots: dict[str, Sampler] = {
        "always_on": ALWAYS_ON,
        "always_off": ALWAYS_OFF,
        "traceidratio": TraceIdRatioBased(ratio),
    }
    base = name.removeprefix("parentbased_")
    if base not in roots:
        raise TracingConfigError(f"OTEL_TRACES_SAMPLER={name!r} is not supported")
    return ParentBased(root=roots[base])


def root_ratio(env: Mapping[str, str], default_ratio: float = 1.0) -> float:
    """The sampling ratio of new traces that the OTEL_TRACES_SAMPLER variables ask for."""
    name = env.get("OTEL_TRACES_SAMPLER", "").strip().lower() or "parentbased_traceidratio"
    base = name.removeprefix("parentbased_")
    if base == "always_on":
        return 1.0
    if base == "always_off":
        return 0.0
    sampler = sampler_from_env(env, default_ratio)  # validates the name and the argument
    root = getattr(sampler, "_root", None)
    rate = getattr(root, "rate", None)
    return float(rate) if isinstance(rate, int | float) else default_ratio


def exports(env: Mapping[str, str]) -> bool:
    """Whether the OTEL_* variables ask for any exporter (without building one)."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    names = {n.strip().lower() for n in env.get("OTEL_TRACES_EXPORTER", "otlp").split(",")}
    if "none" in names:
        return False
    endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    return "console" in names or ("otlp" in names and bool((endpoint or "").strip()))


class _CurrentStdout(io.TextIOBase):
    """`sys.stdout` as it is at each write, not as it was when the exporter was built.

    The SDK's console exporter keeps the `sys.stdout` of its import: under `inferbus up`'s
    live view (rich's `Live`, which swaps `sys.stdout` for a proxy that prints above the
    table) its spans were written past the proxy, into the table's lines.
    """

    def write(self, text: str) -> int:
        return sys.stdout.write(text)

    def flush(self) -> None:
        sys.stdout.flush()


def exporters_from_env(env: Mapping[str, str]) -> list[SpanExporter]:
    """The span exporters the standard OTEL_* variables ask for; none unless an endpoint is set."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return []
    names = [n.strip().lower() for n in env.get("OTEL_TRACES_EXPORTER", "otlp").split(",")]
    exporters: list[SpanExporter] = []
    for name in filter(None, names):
        if name == "none":
            return []
        if name == "console":
            # The SDK types `out` as IO; it only writes and flushes.
            exporters.append(ConsoleSpanExporter(out=cast(IO[str], _CurrentStdout())))
        elif name == "otlp":
            otlp = _otlp_exporter(env)
            if otlp is not None:
                exporters.append(otlp)
        else:
            raise TracingConfigError(f"OTEL_TRACES_EXPORTER={name!r} is not supported")
    return exporters


def _otlp_exporter(env: Mapping[str, str]) -> SpanExporter | None:
    traces_endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    base_endpoint = env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    if not traces_endpoint and not base_endpoint:
        return None
    protocol = (
        env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or ""
    ).strip().lower() or "http/protobuf"
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcExporter,
        )

        return GrpcExporter(endpoint=traces_endpoint or base_endpoint)
    if protocol == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
            OTLPSpanExporter as HttpExporter,
        )

        # The signal-specific variable is used as is; the generic one gets the signal path.
        endpoint = traces_endpoint or base_endpoint.rstrip("/") + "/v1/traces"
        return HttpExporter(endpoint=endpoint)
    raise TracingConfigError(
        f"OTLP protocol {protocol!r} is not supported; use 'http/protobuf' or 'grpc'"
    )


class _Tap(SpanProcessor):
    """Processors attached after start-up (tests' in-memory exporters), removable again."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._processors: tuple[SpanProcessor, ...] = ()

    def add(self, processor: SpanProcessor) -> Callable[[], None]:
        with self._lock:
            self._processors = (*self._processors, processor)

        def detach() -> None:
            with self._lock:
                self._processors = tuple(p for p in self._processors if p is not processor)
            processor.shutdown()

        return detach

    @property
    def attached(self) -> bool:
        return bool(self._processors)

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        for processor in self._processors:
            processor.on_start(span, parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        for processor in self._processors:
            processor.on_end(span)

    def shutdown(self) -> None:
        for processor in self._processors:
            processor.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return all(p.force_flush(timeout_millis) for p in self._processors)


def build_tracer_provider(
    service_name: str,
    *,
    instance_id: str,
    attributes: Mapping[str, str] | None = None,
    sample_ratio: float = 1.0,
    env: Mapping[str, str] | None = None,
    extra_processors: Sequence[SpanProcessor] = (),
) -> TracerProvider:
    """A provider from arguments and OTEL_* variables; `init_tracing` builds the process's one.

    `OTEL_SERVICE_NAME` wins over `service_name`; `OTEL_RESOURCE_ATTRIBUTES` adds attributes
    (the arguments win on a clash). Processors: `extra_processors`, then one batch
    processor per exporter that the OTEL_* variables ask for.
    """
    env = os.environ if env is None else env
    resource = Resource.create(
        {
            **(attributes or {}),
            SERVICE_NAME: env.get("OTEL_SERVICE_NAME") or service_name,
            SERVICE_INSTANCE_ID: instance_id,
        }
    )
    provider = TracerProvider(sampler=sampler_from_env(env, sample_ratio), resource=resource)
    for processor in extra_processors:
        provider.add_span_processor(processor)
    for exporter in exporters_from_env(env):
        provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


class _Process:
    """This process's tracing state, set once by `init_tracing`."""

    lock = threading.Lock()
    provider: TracerProvider | None = None
    tracer: Tracer | None = None
    tap = _Tap()
    ratio = 1.0
    exporting = False


def init_tracing(
    service_name: str,
    *,
    instance_id: str,
    attributes: Mapping[str, str] | None = None,
    sample_ratio: float = 1.0,
) -> TracerProvider:
    """Build this process's provider once (later calls return it) and make it the global one."""
    with _Process.lock:
        if _Process.provider is not None:
            return _Process.provider
        provider = build_tracer_provider(
            service_name,
            instance_id=instance_id,
            attributes=attributes,
            sample_ratio=sample_ratio,
            extra_processors=(_Process.tap,),
        )
        trace.set_tracer_provider(provider)
        # Prometheus sees the same stage samples as the heartbeats.
        default_breakdown().add_observer(observe_stage)
        _Process.provider = provider
        _Process.ratio = root_ratio(os.environ, sample_ratio)
        _Process.exporting = exports(os.environ)
        _Process.tracer = provider.get_tracer(TRACER_NAME)
        log.info(
            "tracing.init service=%s instance=%s sampler=%s",
            service_name,
            instance_id,
            provider.sampler.get_description(),
        )
        return provider


def shutdown_tracing() -> None:
    """Flush and stop exporters; spans after this are not exported."""
    with _Process.lock:
        provider = _Process.provider
    if provider is not None:
        provider.force_flush()
        provider.shutdown()


def tracing_enabled() -> bool:
    """Spans go somewhere (an OTLP or console exporter, or a test's): only then build them."""
    return _Process.exporting or _Process.tap.attached


def sampling_ratio() -> float:
    """The share of new traces (no producer `traceparent`) that are sampled."""
    return _Process.ratio


def attach_exporter(exporter: SpanExporter) -> Callable[[], None]:
    """Send every span from now on to `exporter` synchronously (tests); returns a detach."""
    return _Process.tap.add(SimpleSpanProcessor(exporter))


def get_tracer() -> Tracer:
    """inferbus's tracer: the process provider's, or the global (no-op) one before init."""
    # Built once: the SDK's get_tracer costs as much as a span.
    tracer = _Process.tracer
    return tracer if tracer is not None else trace.get_tracer(TRACER_NAME)

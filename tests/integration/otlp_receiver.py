"""A tiny OTLP/HTTP trace receiver for tests: `POST /v1/traces` (protobuf), kept in memory."""

from __future__ import annotations

import gzip
import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

KINDS = {0: "UNSPECIFIED", 1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}


def _value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [_value(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, which)


@dataclass(frozen=True)
class ReceivedSpan:
    """One exported span, flattened: ids as hex, attributes as a plain dict."""

    service: str
    resource: dict[str, Any]
    name: str
    kind: str
    trace_id: str
    span_id: str
    parent_span_id: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    links: tuple[tuple[str, str], ...]
    status_code: int
    events: tuple[str, ...] = field(default=())

    @property
    def duration_ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6


class OtlpReceiver:
    """`with OtlpReceiver() as rx:` listens on 127.0.0.1:<free port>; `rx.endpoint` for
    `OTEL_EXPORTER_OTLP_ENDPOINT`. Keeps every raw body (as received, decompressed) and
    every span; `wait_for(predicate, timeout_s)` blocks until the spans satisfy it."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.spans: list[ReceivedSpan] = []
        self.requests: list[ExportTraceServiceRequest] = []
        self.errors: list[str] = []
        self._changed = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                encoding = (self.headers.get("Content-Encoding") or "").lower()
                if encoding == "gzip":
                    body = gzip.decompress(body)
                elif encoding == "deflate":
                    body = zlib.decompress(body)
                if self.path != "/v1/traces":
                    receiver._error(f"unexpected path {self.path}")
                    self.send_response(404)
                    self.end_headers()
                    return
                receiver._receive(body)
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet: pytest shows the test's own output."""

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="otlp-receiver", daemon=True
        )

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}"

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def _error(self, message: str) -> None:
        with self._changed:
            self.errors.append(message)
            self._changed.notify_all()

    def _receive(self, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        try:
            request.ParseFromString(body)
        except Exception as exc:  # a malformed export is a finding, not a crash
            self._error(f"undecodable body: {type(exc).__name__}")
            return
        spans = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            service = str(resource.get("service.name", ""))
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    spans.append(
                        ReceivedSpan(
                            service=service,
                            resource=resource,
                            name=span.name,
                            kind=KINDS.get(span.kind, str(span.kind)),
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(),
                            start_ns=span.start_time_unix_nano,
                            end_ns=span.end_time_unix_nano,
                            attributes={a.key: _value(a.value) for a in span.attributes},
                            links=tuple(
                                (link.trace_id.hex(), link.span_id.hex()) for link in span.links
                            ),
                            status_code=span.status.code,
                            events=tuple(e.name for e in span.events),
                        )
                    )
        with self._changed:
            self.bodies.append(body)
            self.requests.append(request)
            self.spans.extend(spans)
            self._changed.notify_all()

    def snapshot(self) -> list[ReceivedSpan]:
        with self._changed:
            return list(self.spans)

    def wait_for(
        self, predicate: Callable[[list[ReceivedSpan]], bool], timeout_s: float
    ) -> list[ReceivedSpan]:
        """The spans once `predicate(spans)` holds; TimeoutError (with what arrived) if not."""
        with self._changed:
            if self._changed.wait_for(lambda: predicate(list(self.spans)), timeout_s):
                return list(self.spans)
            names = sorted({f"{s.service}:{s.name}" for s in self.spans})
        raise TimeoutError(f"spans never matched within {timeout_s}s; received {names}")

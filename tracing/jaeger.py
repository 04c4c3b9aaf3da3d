"""A small client for Jaeger v2's `/api/v3` query API, and request stage breakdowns."""

from __future__ import annotations

import base64
import binascii
import json
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import httpx

from schemas.errors import InferbusError
from tracing import attributes as attr
from tracing.attributes import STAGES

DEFAULT_JAEGER_URL = "http://localhost:16686"
JAEGER_URL_ENV = "INFERBUS_JAEGER_URL"
"""Where `inferbus trace` and `traces` find Jaeger's query API when `--jaeger` is not given."""
DEFAULT_SERVICE = "inferbus-worker"
"""Every request that reached a worker has spans there carrying its request id."""
_ENGINE_STAGES = ("preprocess", "infer", "postprocess")
_PATH_STAGES = ("ingest", "queue", "batch_wait", "publish")
"""Stages every request that reached a worker has a span of, in its own trace."""
SEARCH_DEPTH = 200
"""How many of the newest matching traces one search asks Jaeger for."""


class InvalidTimings(InferbusError):
    """A result's timings that are not stage durations (the CLI says it on one line)."""


class JaegerUnavailableError(InferbusError):
    """Jaeger could not be reached or answered with an error."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__("Jaeger unavailable", url=url, reason=reason)
        self.url = url
        self.reason = reason


@dataclass(frozen=True, slots=True)
class SpanRecord:
    """One span from an OTLP JSON answer, flattened."""

    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    service: str
    start_ns: int
    end_ns: int
    attributes: Mapping[str, Any]
    links: tuple[tuple[str, str], ...] = ()
    error: bool = False

    @property
    def duration_ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6


@dataclass(frozen=True, slots=True)
class Breakdown:
    """Where one request's time went, per stage in ms."""

    request_id: str
    source: Literal["jaeger", "result"]
    stages_ms: Mapping[str, float]
    e2e_ms: float | None
    trace_id: str | None = None
    services: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=())
    status: str | None = None
    """The result's status, when the breakdown comes from a result (`ok`, `invalid_input`, …)."""
    error: str | None = None
    """Why the request failed, in the result's words."""


def _hex_id(raw: str | None) -> str | None:
    """Jaeger answers with hex ids; OTLP's canonical proto-JSON uses base64: accept both."""
    if not raw:
        return None
    if all(c in "0123456789abcdefABCDEF" for c in raw) and len(raw) in (16, 32):
        return raw.lower()
    try:
        return base64.b64decode(raw, validate=True).hex()
    except (binascii.Error, ValueError):
        return raw


def _value(value: Mapping[str, Any]) -> Any:
    for key in ("stringValue", "boolValue", "doubleValue"):
        if key in value:
            return value[key]
    if "intValue" in value:
        return int(value["intValue"])
    if "arrayValue" in value:
        return [_value(v) for v in value["arrayValue"].get("values", [])]
    return None


def _attributes(items: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    return {item["key"]: _value(item.get("value", {})) for item in items}


def parse_otlp(payload: Mapping[str, Any]) -> list[SpanRecord]:
    """Spans of an `/api/v3/traces` answer (`{"result": {"resourceSpans": [...]}}`);
    ValueError for JSON of another shape (another server's answer is not "no spans")."""
    result = payload.get("result", payload) if isinstance(payload, dict) else None
    if not isinstance(result, dict) or not ("result" in payload or "resourceSpans" in result):
        raise ValueError("not OTLP JSON: no `result.resourceSpans`")
    spans: list[SpanRecord] = []
    for resource_spans in result.get("resourceSpans", []):
        resource = _attributes(resource_spans.get("resource", {}).get("attributes", []))
        service = str(resource.get("service.name", "?"))
        for scope_spans in resource_spans.get("scopeSpans", []):
            for raw in scope_spans.get("spans", []):
                status = raw.get("status", {}).get("code")
                spans.append(
                    SpanRecord(
                        trace_id=_hex_id(raw["traceId"]) or "",
                        span_id=_hex_id(raw["spanId"]) or "",
                        parent_span_id=_hex_id(raw.get("parentSpanId")),
                        name=raw.get("name", ""),
                        service=service,
                        start_ns=int(raw["startTimeUnixNano"]),
                        end_ns=int(raw["endTimeUnixNano"]),
                        attributes=_attributes(raw.get("attributes", [])),
                        links=tuple(
                            (_hex_id(link["traceId"]) or "", _hex_id(link["spanId"]) or "")
                            for link in raw.get("links", [])
                        ),
                        error=status in (2, "STATUS_CODE_ERROR"),
                    )
                )
    return spans


def _by_trace(spans: Iterable[SpanRecord]) -> dict[str, list[SpanRecord]]:
    traces: dict[str, list[SpanRecord]] = {}
    for span in spans:
        traces.setdefault(span.trace_id, []).append(span)
    return traces


def _unique(spans: Iterable[SpanRecord]) -> list[SpanRecord]:
    """Each span once: an exporter's retry can leave Jaeger holding a span twice."""
    return list({(s.trace_id, s.span_id): s for s in spans}.values())


def _skew_note(spans: Sequence[SpanRecord]) -> str | None:
    """The span that starts furthest before its parent, said: one host's clock is behind
    another's, and every time measured across the two is off by as much."""
    by_id = {s.span_id: s for s in spans}
    worst: tuple[int, SpanRecord, SpanRecord] | None = None
    for span in spans:
        if span.attributes.get(attr.STAGE) == "queue":
            continue  # starts at its record's timestamp, taken before ingest's send span
        parent = by_id.get(span.parent_span_id or "")
        if parent is not None and (worst is None or parent.start_ns - span.start_ns > worst[0]):
            worst = (parent.start_ns - span.start_ns, span, parent)
    if worst is None or worst[0] / 1e6 < 0.005:
        return None
    ahead_ns, span, parent = worst
    return (
        f"`{span.name}` ({span.service}) starts {ahead_ns / 1e6:.2f} ms before its parent "
        f"`{parent.name}` ({parent.service}): the clocks disagree, so times across them are off"
    )


def breakdown_from_spans(
    request_id: str, spans: Sequence[SpanRecord], batch_spans: Sequence[SpanRecord] = ()
) -> Breakdown:
    """Stage times from one request's trace, plus its batch's engine spans (another trace);
    notes for what the trace lacks and for clocks that disagree."""
    spans = _unique(spans)
    stages: dict[str, float] = {}
    for span in _unique([*spans, *batch_spans]):
        stage = span.attributes.get(attr.STAGE)
        if isinstance(stage, str):
            stages[stage] = stages.get(stage, 0.0) + span.duration_ms
    e2e = None
    if spans:
        e2e = (max(s.end_ns for s in spans) - min(s.start_ns for s in spans)) / 1e6
    notes: list[str] = []
    missing = [stage for stage in _PATH_STAGES if stage not in stages]
    if spans and missing:
        names = ", ".join(f"`{stage}`" for stage in missing)
        why = "not reached, or not exported: its time counts as not in a stage"
        notes.append(f"no {names} span in the trace ({why})")
    if spans and not any(stage in stages for stage in _ENGINE_STAGES):
        notes.append("no engine spans found for this request's batch")
    notes.extend(
        f"`{stage}` is {ms:.2f} ms: its span ends before it starts (clocks that disagree)"
        for stage, ms in stages.items()
        if ms < 0
    )
    skew = _skew_note(spans)
    if skew is not None:
        notes.append(skew)
    return Breakdown(
        request_id=request_id,
        source="jaeger",
        stages_ms={s: stages[s] for s in STAGES if s in stages},
        e2e_ms=stages.get("e2e", e2e),
        trace_id=spans[0].trace_id if spans else None,
        services=tuple(sorted({s.service for s in spans})),
        notes=tuple(notes),
    )


_JSON_KINDS: dict[type, str] = {
    str: "a string",
    list: "a list",
    dict: "an object",
    bool: "a boolean",
}


def duration_ms(key: str, value: object) -> float:
    """A stage's time from a result's timings: a finite number of ms, 0 or more; anything
    else is InvalidTimings naming `key`."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        kind = _JSON_KINDS.get(type(value), type(value).__name__)
        raise InvalidTimings(f"`{key}` is {kind}, not a number of milliseconds")
    try:
        ms = float(value)
    except OverflowError:  # a JSON integer beyond float's range
        ms = math.inf
    if not math.isfinite(ms) or ms < 0:
        raise InvalidTimings(f"`{key}` is {ms:g}, not a duration (milliseconds, 0 or more)")
    return ms


def breakdown_from_timings(
    request_id: str,
    timings: Mapping[str, object],
    *,
    note: str | None = None,
    status: str | None = None,
    error: str | None = None,
) -> Breakdown:
    """Stage times from a result's `timings` (`queue_ms` or `queue` keys), when Jaeger can't;
    InvalidTimings for a value that is not a duration."""
    stages: dict[str, float] = {}
    for stage in STAGES:
        key = f"{stage}_ms" if f"{stage}_ms" in timings else stage
        value = timings.get(key)
        if value is not None:
            stages[stage] = duration_ms(key, value)
    return Breakdown(
        request_id=request_id,
        source="result",
        stages_ms=stages,
        e2e_ms=stages.get("e2e"),
        notes=(note,) if note else (),
        status=status,
        error=error,
    )


_NOT_JSON = object()


class JaegerClient:
    """Synchronous (CLI) client of `/api/v3/traces`."""

    def __init__(
        self,
        base_url: str = DEFAULT_JAEGER_URL,
        *,
        timeout_s: float = 5.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout_s, transport=transport)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> JaegerClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _get(self, path: str, params: Mapping[str, str] | None = None) -> list[SpanRecord]:
        status, body = self._fetch(path, params)
        try:
            payload: Any = json.loads(body)
        except ValueError:
            payload = _NOT_JSON
        error = payload.get("error") if isinstance(payload, dict) else None
        if status == 404 and isinstance(error, dict):
            # Jaeger's own 404 (`{"error": {"message": "No traces found"}}`): no match.
            # Any other 404 is a URL that is not Jaeger's query API.
            return []
        if status >= 400:
            said = error.get("message") if isinstance(error, dict) else None
            why = f"HTTP {status}: {' '.join(str(said).split())}" if said else f"HTTP {status}"
            if status == 404:
                why += ", no /api/v3 here: is it Jaeger's query port (16686)?"
            raise JaegerUnavailableError(self.base_url, why)
        if payload is _NOT_JSON:
            raise JaegerUnavailableError(self.base_url, "its answer is not JSON")
        try:
            return parse_otlp(payload)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise JaegerUnavailableError(self.base_url, f"unreadable answer ({exc})") from exc

    def _fetch(self, path: str, params: Mapping[str, str] | None) -> tuple[int, bytes]:
        """Status and body, within `timeout_s` for the whole answer (httpx's timeout is per
        read: a server that trickles bytes would hold the CLI for ever)."""
        deadline = time.monotonic() + self.timeout_s
        body = bytearray()
        try:
            with self._http.stream("GET", path, params=params) as response:
                for chunk in response.iter_bytes():
                    body += chunk
                    if time.monotonic() > deadline:
                        raise httpx.ReadTimeout("answer too slow")
        except httpx.TimeoutException as exc:
            why = f"no whole answer within {self.timeout_s:g} s ({type(exc).__name__})"
            raise JaegerUnavailableError(self.base_url, why) from exc
        except httpx.HTTPError as exc:
            said = " ".join(str(exc).split())
            why = f"{type(exc).__name__}: {said}" if said else type(exc).__name__
            raise JaegerUnavailableError(self.base_url, why) from exc
        return response.status_code, bytes(body)

    def find_spans(
        self,
        *,
        service: str = DEFAULT_SERVICE,
        attributes: Mapping[str, str] | None = None,
        lookback_s: float = 3600.0,
        limit: int = SEARCH_DEPTH,
        now: datetime | None = None,
    ) -> list[SpanRecord]:
        """Spans of up to `limit` traces with a `service` span matching `attributes` (Jaeger
        before 2.19 ignores `attributes`: callers match the spans again)."""
        end = now or datetime.now(UTC)
        params = {
            "query.service_name": service,
            "query.start_time_min": (end - timedelta(seconds=lookback_s)).isoformat(),
            "query.start_time_max": end.isoformat(),
            "query.search_depth": str(limit),
            "query.num_traces": str(limit),  # the name before Jaeger 2.19, still read
        }
        if attributes:
            params["query.attributes"] = _json_map(attributes)
        return self._get("/api/v3/traces", params)

    def get_trace(self, trace_id: str) -> list[SpanRecord]:
        """Every span of one trace."""
        return self._get(f"/api/v3/traces/{trace_id}")

    def request_breakdown(
        self, request_id: str, *, service: str = DEFAULT_SERVICE, lookback_s: float = 3600.0
    ) -> Breakdown | None:
        """The request's stages, following its batch id to the engine spans; None if unknown."""
        found = self.find_spans(
            service=service, attributes={attr.REQUEST_ID: request_id}, lookback_s=lookback_s
        )
        if not found:
            return None
        # The request's own trace is the one whose spans carry its id; the other traces
        # are other requests' (a Jaeger that ignores the attribute filter sends them).
        trace_ids = [s.trace_id for s in found if s.attributes.get(attr.REQUEST_ID) == request_id]
        if not trace_ids:
            return None
        spans = _by_trace(found)[trace_ids[0]]
        return breakdown_from_spans(
            request_id, spans, self._batch_spans(spans, service=service, lookback_s=lookback_s)
        )

    def _batch_spans(
        self, spans: Sequence[SpanRecord], *, service: str, lookback_s: float
    ) -> list[SpanRecord]:
        stages = {s.attributes.get(attr.STAGE) for s in spans}
        if any(stage in stages for stage in _ENGINE_STAGES):
            return []
        batch_ids = _batch_ids(spans)
        if not batch_ids:
            return []
        batch_id = batch_ids[0]
        found = self.find_spans(
            service=service, attributes={attr.BATCH_ID: batch_id}, lookback_s=lookback_s
        )
        return [
            s
            for s in found
            if s.attributes.get(attr.BATCH_ID) == batch_id
            and s.attributes.get(attr.STAGE) in _ENGINE_STAGES
        ]

    def slowest(
        self,
        n: int,
        *,
        service: str = DEFAULT_SERVICE,
        lookback_s: float = 3600.0,
        depth: int = SEARCH_DEPTH,
    ) -> list[Breakdown]:
        """The `n` slowest request traces among the last `depth` that reached `service`,
        each with its batch's engine spans (another trace): from the same answer when the
        batch's trace is among it, else asked for. Without them every row said "no engine
        spans found", the stage a slow request most often spent its time in."""
        found = self.find_spans(service=service, lookback_s=lookback_s, limit=depth)
        engine = _engine_spans_by_batch(found)
        requests: list[tuple[Breakdown, list[SpanRecord]]] = []
        for spans in _by_trace(found).values():
            ids = [s.attributes.get(attr.REQUEST_ID) for s in spans]
            request_id = next((str(i) for i in ids if i), None)
            if request_id is not None:
                requests.append((breakdown_from_spans(request_id, spans), spans))
        requests.sort(key=lambda pair: pair[0].e2e_ms or 0.0, reverse=True)
        slowest: list[Breakdown] = []
        for breakdown, spans in requests[:n]:
            batches = _batch_ids(spans)
            batch = engine.get(batches[0], []) if batches else []
            if not batch:
                batch = self._batch_spans(spans, service=service, lookback_s=lookback_s)
            slowest.append(breakdown_from_spans(breakdown.request_id, spans, batch))
        return slowest


def _batch_ids(spans: Iterable[SpanRecord]) -> list[str]:
    """The batch ids a request's spans name, sorted (one, unless it was retried)."""
    return sorted({str(b) for s in spans if (b := s.attributes.get(attr.BATCH_ID)) is not None})


def _engine_spans_by_batch(spans: Iterable[SpanRecord]) -> dict[str, list[SpanRecord]]:
    """The engine-stage spans among `spans`, by their batch id."""
    by_batch: dict[str, list[SpanRecord]] = {}
    for span in spans:
        batch = span.attributes.get(attr.BATCH_ID)
        if batch is not None and span.attributes.get(attr.STAGE) in _ENGINE_STAGES:
            by_batch.setdefault(str(batch), []).append(span)
    return by_batch


def _json_map(values: Mapping[str, str]) -> str:
    return json.dumps(dict(values), separators=(",", ":"))

"""What `inferbus trace`/`traces` make of Jaeger's answers, good and bad, and of traces that
lack spans, hold a span twice, or were timed by clocks that disagree."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from services.cli.common import BROKEN_PIPE
from services.cli.main import app
from tests.gone_reader import run_to_a_gone_reader
from tracing.cli import unstaged_ms
from tracing.jaeger import (
    SEARCH_DEPTH,
    JaegerClient,
    JaegerUnavailableError,
    SpanRecord,
    breakdown_from_spans,
)

from .test_jaeger import REQUEST_SPANS, _answer

MS = 1_000_000


def _client(status: int, body: bytes, content_type: str = "application/json") -> JaegerClient:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, content=body, headers={"content-type": content_type})

    return JaegerClient("http://jaeger.test", transport=httpx.MockTransport(answer))


JAEGERS_404 = b'{"error":{"httpCode":404,"message":"No traces found"}}'


@pytest.mark.parametrize(
    ("status", "body", "content_type", "words"),
    [
        pytest.param(500, b'{"error":{"message":"db\\ndown"}}', "text/plain", "HTTP 500: db down",
                     id="500-with-jaegers-reason"),
        pytest.param(400, b'{"error":{"message":"malformed parameter query.start_time_min"}}',
                     "text/plain", "HTTP 400: malformed parameter", id="400-with-jaegers-reason"),
        pytest.param(502, b"<html>bad gateway</html>", "text/html", "HTTP 502", id="502-html"),
        pytest.param(404, b"404 page not found\n", "text/plain",
                     "HTTP 404, no /api/v3 here: is it Jaeger's query port", id="404-not-jaeger"),
        pytest.param(404, b"", "text/plain", "HTTP 404, no /api/v3", id="404-empty"),
        pytest.param(200, b"<html>Jaeger UI</html>", "text/html", "its answer is not JSON",
                     id="html"),
        pytest.param(200, b"[]", "application/json", "not OTLP JSON", id="array"),
        pytest.param(200, b'"hello"', "application/json", "not OTLP JSON", id="string"),
        pytest.param(200, b"null", "application/json", "not OTLP JSON", id="null"),
        pytest.param(200, b'{"result": []}', "application/json", "not OTLP JSON",
                     id="result-is-a-list"),
        pytest.param(200, b'{"data": []}', "application/json", "not OTLP JSON",
                     id="jaeger-v1-shape"),
        pytest.param(200, b'{"resourceSpans": ["x"]}', "application/json", "unreadable answer",
                     id="resource-spans-of-strings"),
    ],
)  # fmt: skip
def test_an_answer_that_is_not_jaegers_is_said(
    status: int, body: bytes, content_type: str, words: str
) -> None:
    """Regression: AttributeError tracebacks for JSON of another shape; any 404, or JSON
    without `result`, read as "no trace" (a wrong URL looked like an unknown request)."""
    with _client(status, body, content_type) as client, pytest.raises(JaegerUnavailableError) as e:
        client.request_breakdown("r-1")
    assert words in e.value.reason


@pytest.mark.parametrize(
    ("status", "body"),
    [
        pytest.param(404, JAEGERS_404, id="jaegers-404"),
        pytest.param(200, b'{"result": {}}', id="empty-result"),
        pytest.param(200, b'{"result": {"resourceSpans": []}}', id="no-resource-spans"),
    ],
)
def test_jaegers_own_no_match_is_no_trace(status: int, body: bytes) -> None:
    with _client(status, body) as client:
        assert client.request_breakdown("r-1") is None


def test_a_request_no_span_names_is_no_trace_when_jaeger_ignores_the_filter() -> None:
    """Regression: Jaeger before 2.19 (the compose file's 2.5.0) ignores `query.attributes`
    and answers with recent traces; an unknown id got the first one's breakdown as its own."""
    with _client(200, json.dumps(_answer("inferbus-worker", REQUEST_SPANS)).encode()) as client:
        assert client.request_breakdown("never-sent") is None
        assert client.request_breakdown("r-1") is not None


def test_the_search_depth_goes_under_both_names() -> None:
    """Regression: only `query.search_depth` was sent, which Jaeger before 2.19 ignores (its
    name there is `query.num_traces`): `traces` read every trace in the window."""
    seen: list[httpx.QueryParams] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.params)
        return httpx.Response(404, content=JAEGERS_404)

    with JaegerClient("http://jaeger.test", transport=httpx.MockTransport(answer)) as client:
        client.slowest(3)
    assert seen[0]["query.num_traces"] == seen[0]["query.search_depth"] == str(SEARCH_DEPTH)


class _Trickle(httpx.SyncByteStream):
    """A body that never ends: a byte every 50 ms."""

    def __iter__(self) -> Iterator[bytes]:
        while True:
            time.sleep(0.05)
            yield b" "


def _trickling() -> JaegerClient:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, stream=_Trickle())

    return JaegerClient("http://jaeger.test", timeout_s=0.3, transport=httpx.MockTransport(answer))


@pytest.fixture
def silent_url() -> Iterator[str]:
    """A port that takes connections (the kernel's backlog) and never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


@pytest.mark.parametrize("kind", ["trickle", "silent"])
def test_a_jaeger_that_never_finishes_answering_is_given_up_on(kind: str, silent_url: str) -> None:
    """Regression: httpx's timeout is per read, so a server that trickles bytes held
    `inferbus trace` for ever."""
    outcome: list[BaseException] = []

    def ask() -> None:
        client = _trickling() if kind == "trickle" else JaegerClient(silent_url, timeout_s=0.3)
        try:
            with client:
                client.request_breakdown("r-1")
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=ask, daemon=True)
    thread.start()
    thread.join(timeout=5)
    assert not thread.is_alive(), "still waiting on Jaeger after 5 s"
    (error,) = outcome
    assert isinstance(error, JaegerUnavailableError)
    assert "no whole answer within 0.3 s" in error.reason


def _span(
    span: str,
    name: str,
    start_ms: float,
    end_ms: float,
    *,
    parent: str | None = None,
    service: str = "inferbus-worker",
    stage: str | None = None,
) -> SpanRecord:
    attributes = {"inferbus.request_id": "r-1"}
    if stage is not None:
        attributes["inferbus.stage"] = stage
    return SpanRecord(
        trace_id="t" * 32,
        span_id=span,
        parent_span_id=parent,
        name=name,
        service=service,
        start_ns=int(start_ms * MS),
        end_ns=int(end_ms * MS),
        attributes=attributes,
    )


INGEST = _span("i", "process inferbus.ingest", 5, 8, service="inferbus-ingest", stage="ingest")
SEND = _span("s", "send inferbus.req.m.t", 7, 8, parent="i", service="inferbus-ingest")
# The queue span starts at its record's timestamp, which is taken before the send span.
QUEUE = _span("q", "queue", 6.5, 30, parent="s", stage="queue")
PROCESS = _span("p", "process inferbus.req.m.t", 30, 60, parent="s")
WAIT = _span("w", "batch.wait", 30, 34, parent="p", stage="batch_wait")
RUN = _span("r", "run", 34, 50, parent="p", stage="infer")
PUBLISH = _span("u", "send inferbus.results", 50, 60, parent="p", stage="publish")
TRACE = [INGEST, SEND, QUEUE, PROCESS, WAIT, RUN, PUBLISH]


def _shifted(span: SpanRecord, ms: float) -> SpanRecord:
    return SpanRecord(
        **{
            **{f: getattr(span, f) for f in SpanRecord.__dataclass_fields__},
            "start_ns": span.start_ns + int(ms * MS),
            "end_ns": span.end_ns + int(ms * MS),
        }
    )


@pytest.mark.parametrize(
    ("spans", "stages", "note"),
    [
        pytest.param(TRACE, {"queue": 23.5, "infer": 16.0, "publish": 10.0}, None, id="whole"),
        pytest.param([*TRACE, QUEUE, RUN], {"queue": 23.5, "infer": 16.0}, None,
                     id="a-span-twice-counts-once"),
        pytest.param([s for s in TRACE if s is not INGEST], {"queue": 23.5},
                     "no `ingest` span in the trace", id="no-ingest-span"),
        pytest.param([INGEST, SEND], {"ingest": 3.0},
                     "no `queue`, `batch_wait`, `publish` span", id="no-worker-spans"),
        pytest.param([*(s for s in TRACE if s is not QUEUE),
                      _span("q", "queue", 30, 20, parent="s", stage="queue")],
                     {"queue": -10.0}, "`queue` is -10.00 ms: its span ends before it starts",
                     id="negative-duration"),
        pytest.param([INGEST, SEND, QUEUE, *(_shifted(s, -500) for s in TRACE[3:])],
                     {"batch_wait": 4.0},
                     "`process inferbus.req.m.t` (inferbus-worker) starts 477.00 ms before its "
                     "parent `send inferbus.req.m.t` (inferbus-ingest)",
                     id="worker-clock-behind"),
    ],
)  # fmt: skip
def test_breakdown_from_spans(
    spans: list[SpanRecord], stages: dict[str, float], note: str | None
) -> None:
    """Regression: a span Jaeger holds twice (an exporter's retry) doubled its stage, and a
    trace without a stage's span, with a negative span or a host's clock behind, said
    nothing: its time went to `not in a stage` or into another stage unremarked."""
    got = breakdown_from_spans("r-1", spans)
    for stage, ms in stages.items():
        assert got.stages_ms[stage] == pytest.approx(ms)
    if note is None:
        assert [n for n in got.notes if "engine" not in n] == []
    else:
        assert any(note in n for n in got.notes), got.notes


def test_a_traces_e2e_holds_its_publish() -> None:
    """Regression: e2e from a trace runs to its last span's end, past the reply's publish,
    yet `not in a stage` left `publish` out, so it counted the publish twice."""
    client = _span("c", "send inferbus.ingest", 0, 2, service="inferbus-client")
    got = breakdown_from_spans("r-1", [client, *TRACE])
    assert got.e2e_ms == 60.0
    within = 3.0 + 23.5 + 4.0 + 16.0 + 10.0  # publish's 10 included
    assert unstaged_ms(got.stages_ms, got.e2e_ms, source="jaeger") == pytest.approx(60 - within)
    assert unstaged_ms({"queue": 8.0, "publish": 30.0}, 10.0) == pytest.approx(2.0)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        pytest.param(["trace", "r-1", "--lookback-s", "nan"], "> 0 and <=", id="lookback-nan"),
        pytest.param(["trace", "r-1", "--lookback-s", "inf"], "> 0 and <=", id="lookback-inf"),
        pytest.param(["trace", "r-1", "--lookback-s", "1e30"], "> 0 and <=", id="lookback-huge"),
        pytest.param(["trace", "r-1", "--lookback-s", "0"], "> 0 and <=", id="lookback-zero"),
        pytest.param(["traces", "--lookback-s", "-5"], "> 0 and <=", id="traces-lookback-negative"),
        pytest.param(["trace", ""], "is not a request id", id="id-empty"),
        pytest.param(["trace", "a b"], "is not a request id", id="id-space"),
        pytest.param(["trace", "[red]x"], "is not a request id", id="id-markup"),
        pytest.param(["trace", "x" * 129], "is not a request id", id="id-too-long"),
        pytest.param(["trace", "r-1", "--jaeger", "http://localhost:99999"],
                     "is not an http(s) URL", id="url-port-out-of-range"),
    ],
)  # fmt: skip
def test_nonsense_flags_are_usage_errors(args: list[str], words: str) -> None:
    """Regression: NaN, infinite or huge --lookback-s ended in a traceback, 0 or negative in
    Jaeger's HTTP 400 said as "unavailable"; an id no request can have was searched for."""
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert words in " ".join(result.output.replace("│", " ").split())
    assert "Traceback" not in result.output


def test_a_reader_that_goes_ends_trace_with_141(tmp_path: Path) -> None:
    """Regression: rich's console ends a broken pipe with exit 1 (a failure), not the 141
    every other command gives."""
    result_file = tmp_path / "result.json"
    timings = {"queue_ms": 1.0, "e2e_ms": 2.0}
    result_file.write_text(json.dumps({"request_id": "r-1", "model": "m", "status": "ok",
                                       "timings": timings}))  # fmt: skip
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    done = run_to_a_gone_reader(
        ["trace", "r-1", "--jaeger", dead, "--result-json", str(result_file)]
    )
    assert done.returncode == BROKEN_PIPE, done.stderr
    assert done.stderr == b""

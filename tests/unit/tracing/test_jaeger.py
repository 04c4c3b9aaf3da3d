"""The Jaeger v3 client against a tiny local server, and the CLI's fallback to result timings."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import httpx
import pytest
from typer.testing import CliRunner

from services.cli.main import app
from tracing.cli import trace_app
from tracing.jaeger import JaegerClient, JaegerUnavailableError, breakdown_from_timings

TRACE = "5b8efff798038103d269b633813fc60c"
BATCH_TRACE = "0af7651916cd43dd8448eb211c80319c"


def _attr(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    return {"key": key, "value": {"stringValue": value}}


def _span(
    trace: str, span: str, name: str, start_ms: int, end_ms: int, **attrs: Any
) -> dict[str, Any]:
    return {
        "traceId": trace,
        "spanId": span,
        "parentSpanId": "",
        "name": name,
        "kind": 5,
        "startTimeUnixNano": str(start_ms * 1_000_000),
        "endTimeUnixNano": str(end_ms * 1_000_000),
        "attributes": [_attr(k.replace("__", "."), v) for k, v in attrs.items()],
        "status": {},
    }


def _answer(service: str, spans: list[dict[str, Any]]) -> dict[str, Any]:
    """The shape Jaeger v2 returns from /api/v3/traces (OTLP JSON under `result`)."""
    return {
        "result": {
            "resourceSpans": [
                {
                    "resource": {"attributes": [_attr("service.name", service)]},
                    "scopeSpans": [{"scope": {"name": "inferbus"}, "spans": spans}],
                }
            ]
        }
    }


REQUEST_SPANS = [
    _span(TRACE, "a1a1a1a1a1a1a1a1", "queue", 0, 30, inferbus__stage="queue",
          inferbus__request_id="r-1"),
    _span(TRACE, "b2b2b2b2b2b2b2b2", "process inferbus.req.m.batch", 30, 100,
          inferbus__request_id="r-1", inferbus__batch_id="b-9"),
    _span(TRACE, "c3c3c3c3c3c3c3c3", "batch.wait", 30, 40, inferbus__stage="batch_wait",
          inferbus__request_id="r-1", inferbus__batch_id="b-9"),
    _span(TRACE, "d4d4d4d4d4d4d4d4", "send inferbus.results", 90, 100, inferbus__stage="publish",
          inferbus__request_id="r-1"),
]  # fmt: skip
BATCH_SPANS = [
    _span(BATCH_TRACE, "e5e5e5e5e5e5e5e5", "infer", 40, 90, inferbus__batch_id="b-9"),
    _span(BATCH_TRACE, "f6f6f6f6f6f6f6f6", "preprocess", 40, 45, inferbus__stage="preprocess",
          inferbus__batch_id="b-9", inferbus__request_count=4),
    _span(BATCH_TRACE, "a7a7a7a7a7a7a7a7", "run", 45, 85, inferbus__stage="infer",
          inferbus__batch_id="b-9", inferbus__request_count=4),
]  # fmt: skip


class _Jaeger(BaseHTTPRequestHandler):
    queries: list[dict[str, list[str]]] = []

    def do_GET(self) -> None:
        url = urlparse(self.path)
        query = parse_qs(url.query)
        self.queries.append(query)
        wanted = json.loads(query.get("query.attributes", ["{}"])[0])
        if url.path != "/api/v3/traces" or "query.start_time_min" not in query:
            body, status = {"error": {"message": "bad request"}}, 400
        elif wanted.get("inferbus.request_id") == "r-1":
            body, status = _answer("inferbus-worker", REQUEST_SPANS), 200
        elif wanted.get("inferbus.batch_id") == "b-9":
            body, status = _answer("inferbus-worker", BATCH_SPANS), 200
        elif not wanted:
            body, status = _answer("inferbus-worker", REQUEST_SPANS), 200
        else:
            body, status = {"error": {"message": "trace not found"}}, 404
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


@pytest.fixture
def jaeger() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), _Jaeger)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def dead_url() -> str:
    server = HTTPServer(("127.0.0.1", 0), _Jaeger)
    url = f"http://127.0.0.1:{server.server_address[1]}"
    server.server_close()
    return url


def test_request_breakdown_follows_the_batch(jaeger: str) -> None:
    with JaegerClient(jaeger) as client:
        breakdown = client.request_breakdown("r-1")
    assert breakdown is not None
    assert breakdown.trace_id == TRACE
    assert dict(breakdown.stages_ms) == {
        "queue": 30.0,
        "batch_wait": 10.0,
        "preprocess": 5.0,
        "infer": 40.0,
        "publish": 10.0,
    }
    assert breakdown.e2e_ms == 100.0
    assert breakdown.services == ("inferbus-worker",)
    first = _Jaeger.queries[-2]
    assert first["query.service_name"] == ["inferbus-worker"]


def test_unknown_request_is_none(jaeger: str) -> None:
    with JaegerClient(jaeger) as client:
        assert client.request_breakdown("nope") is None


def test_slowest_asks_for_a_batch_its_answer_lacks(jaeger: str) -> None:
    """Regression: `traces` left out every batch's engine spans (another trace): each row
    said "no engine spans found for this request's batch"."""
    with JaegerClient(jaeger) as client:
        (only,) = client.slowest(5)
    assert only.request_id == "r-1" and only.e2e_ms == 100.0
    assert only.stages_ms["infer"] == 40.0 and only.stages_ms["preprocess"] == 5.0
    assert not any("no engine spans" in note for note in only.notes)
    asked = json.loads(_Jaeger.queries[-1].get("query.attributes", ["{}"])[0])
    assert asked == {"inferbus.batch_id": "b-9"}


def test_slowest_takes_a_batch_from_its_own_answer() -> None:
    asked: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        asked.append(str(request.url))
        body = _answer("inferbus-worker", [*REQUEST_SPANS, *BATCH_SPANS])
        return httpx.Response(200, json=body)

    with JaegerClient("http://jaeger.test", transport=httpx.MockTransport(answer)) as client:
        (only,) = client.slowest(5)
    assert only.stages_ms["infer"] == 40.0
    assert len(asked) == 1  # the batch's trace was in the answer: nothing more asked


def test_unreachable_jaeger_raises(dead_url: str) -> None:
    with JaegerClient(dead_url, timeout_s=1) as client, pytest.raises(JaegerUnavailableError):
        client.request_breakdown("r-1")


def test_cli_trace_from_jaeger(jaeger: str) -> None:
    result = CliRunner().invoke(trace_app, ["trace", "r-1", "--jaeger", jaeger])
    assert result.exit_code == 0, result.output
    assert TRACE in result.output and "batch_wait" in result.output


def test_cli_trace_falls_back_to_result_timings(dead_url: str, tmp_path: Path) -> None:
    result_file = tmp_path / "result.json"
    result_file.write_text(
        json.dumps(
            {
                "request_id": "r-1",
                "model": "demo-mlp",
                "status": "ok",
                "timings": {"queue_ms": 12.0, "e2e_ms": 40.0},
            }
        )
    )
    args = ["trace", "r-1", "--jaeger", dead_url, "--result-json", str(result_file)]
    result = CliRunner().invoke(trace_app, args)
    assert result.exit_code == 0, result.output
    assert "unavailable" in result.output and "result's timings" in result.output
    assert "12.00" in result.output and "30.0" in result.output


@pytest.mark.parametrize(
    ("args", "result_text", "words"),
    [
        pytest.param(["trace", "r-1"], None, "unavailable (", id="no-fallback"),
        pytest.param(["trace", "r-1"], "garbage{", "is not JSON", id="result-not-json"),
        pytest.param(
            ["trace", "r-2"],
            '{"request_id": "r-1", "model": "m", "status": "ok", "timings": {"e2e_ms": 40.0}}',
            "is the result of request r-1, not r-2",
            id="another-requests-result",
        ),
        pytest.param(["traces", "--slowest", "3"], None, "unavailable (", id="traces"),
    ],
)
def test_cli_trace_failures_are_one_error_line(
    dead_url: str, tmp_path: Path, args: list[str], result_text: str | None, words: str
) -> None:
    """On stderr, as every command's expected failure (docs/operations.md), not a
    traceback, nor another request's timings under the id asked for."""
    extra = ["--jaeger", dead_url]
    if result_text is not None:
        (tmp_path / "result.json").write_text(result_text)
        extra += ["--result-json", str(tmp_path / "result.json")]
    result = CliRunner().invoke(app, [*args, *extra])
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith("error: ") and words in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1
    assert "Traceback" not in result.output


def test_cli_traces_slowest(jaeger: str) -> None:
    result = CliRunner().invoke(trace_app, ["traces", "--slowest", "3", "--jaeger", jaeger])
    assert result.exit_code == 0, result.output
    assert "r-1" in result.output


def test_breakdown_from_timings_accepts_both_key_styles() -> None:
    got = breakdown_from_timings("r", {"queue_ms": 1.0, "infer": 2.0, "e2e_ms": None})
    assert dict(got.stages_ms) == {"queue": 1.0, "infer": 2.0}
    assert got.source == "result" and got.e2e_ms is None

"""`inferbus trace`: the part of e2e that no stage covers, what it says of a result file
it cannot use, and of a Jaeger URL that is not one."""

from __future__ import annotations

import io
import json
import socket
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner, Result

from services.cli.main import app
from tracing.cli import UNSTAGED, render, unstaged_ms
from tracing.jaeger import InvalidTimings, breakdown_from_timings

# A newcomer's request on an idle stack (stop 32): the stages covered a fifth of e2e.
IDLE = {
    "ingest_ms": 0.75,
    "queue_ms": 8.05,
    "batch_wait_ms": 2.44,
    "preprocess_ms": 0.78,
    "infer_ms": 0.46,
    "postprocess_ms": 0.19,
    "e2e_ms": 63.67,
}


@pytest.mark.parametrize(
    ("stages", "e2e", "expected"),
    [
        pytest.param({"queue": 8.0, "infer": 2.0}, 15.0, 5.0, id="the-rest"),
        pytest.param({"queue": 8.0, "publish": 30.0}, 10.0, 2.0, id="publish-comes-after-e2e"),
        pytest.param({"queue": 8.0, "e2e": 10.0}, 10.0, 2.0, id="e2e-is-not-a-part"),
        pytest.param({"queue": 12.0}, 10.0, None, id="clocks-disagree"),
        pytest.param({"queue": 10.0}, 10.0, None, id="nothing-left"),
        pytest.param({"queue": 8.0}, None, None, id="no-e2e"),
    ],
)
def test_unstaged_ms(stages: dict[str, float], e2e: float | None, expected: float | None) -> None:
    assert unstaged_ms(stages, e2e) == (pytest.approx(expected) if expected else None)


def test_the_table_shows_the_time_outside_every_stage() -> None:
    out = io.StringIO()
    render(breakdown_from_timings("r-1", IDLE), Console(file=out, width=120))

    row = next(line for line in out.getvalue().splitlines() if UNSTAGED in line)
    assert "51.00" in row and "80.1" in row


@pytest.fixture
def dead_url() -> str:
    """A Jaeger URL where nothing listens: `trace` falls back to the result file."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def _result(status: str = "ok", **fields: object) -> str:
    return json.dumps({"request_id": "r-1", "model": "m", "status": status, **fields})


def _trace(dead_url: str, path: Path, *extra: str) -> Result:
    args = ["trace", "r-1", "--jaeger", dead_url, "--result-json", str(path), *extra]
    return CliRunner().invoke(app, args)


@pytest.mark.parametrize(
    ("content", "words"),
    [
        pytest.param('{"e2e_ms": "abc"}', "(e2e_ms: Input should be a valid number)", id="string"),
        pytest.param('{"e2e_ms": [1]}', "(e2e_ms: Input should be a valid number)", id="list"),
        pytest.param('{"e2e_ms": true}', "(e2e_ms: Input should be a valid number)", id="bool"),
        pytest.param(b"\xff\xfe{}", "is not UTF-8 text (byte 0)", id="not-utf8"),
        pytest.param("garbage{", "is not JSON", id="not-json"),
        pytest.param('{"e2e_ms": 1' + "0" * 5000 + "}", "is not JSON", id="too-many-digits"),
        pytest.param("[1, 2]", "holds an array, not a result object", id="array"),
        pytest.param("42", "holds a number, not a result object", id="number"),
        pytest.param("{}", "holds no stage timings", id="empty"),
        pytest.param('{"foo": 1}', "holds no stage timings", id="no-timing-field"),
        pytest.param('{"ingest_ms": -1, "e2e_ms": 5}', "`ingest_ms` is -1, not a", id="negative"),
        pytest.param('{"queue_ms": NaN, "e2e_ms": 5}', "`queue_ms` is nan, not a", id="nan"),
        pytest.param('{"e2e_ms": Infinity}', "`e2e_ms` is inf, not a", id="infinite"),
        pytest.param(
            _result(timings={"e2e_ms": -3}), "`timings.e2e_ms` is -3, not a", id="result-negative"
        ),
        pytest.param(
            _result(timings={"e2e_ms": "7"}),
            "not a valid result (timings.e2e_ms: Input should be a valid number)",
            id="result-string",
        ),
        pytest.param(
            '{"request_id": "r-1", "timings": {"e2e_ms": 4}}',
            "not a valid result (model: Field required; status: Field required)",
            id="result-without-status",
        ),
        pytest.param(_result("fine", timings={"e2e_ms": 4}), "status: Input should", id="status"),
        pytest.param(_result(timings=None), "timings: Input should be", id="timings-null"),
        pytest.param(_result(), "holds no stage timings (`timings`)", id="ok-without-timings"),
        pytest.param(None, "does not exist", id="missing-file"),
    ],
)
def test_a_result_file_it_cannot_use_is_one_error_line(
    dead_url: str, tmp_path: Path, content: str | bytes | None, words: str
) -> None:
    """Regression: tracebacks (ValueError, TypeError, UnicodeDecodeError), usage text and
    exit 2 for an array, and garbage (`{}`, negative or NaN stages) shown as timings."""
    path = tmp_path / "result.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)

    result = _trace(dead_url, path)

    assert result.exit_code == 1, result.output
    assert result.stderr.startswith(f"error: {path}") and words in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.output


def test_an_error_result_says_its_status_and_why(dead_url: str, tmp_path: Path) -> None:
    """Regression: an `invalid_input` result printed `ingest 0.31 / e2e -` and nothing else."""
    error = {
        "code": "invalid_input",
        "message": "input 'x' has shape [1, 3]; the model takes [-1, 16]",
    }
    path = tmp_path / "result.json"
    path.write_text(_result("invalid_input", error=error, timings={"ingest_ms": 0.31}))

    result = _trace(dead_url, path)

    assert result.exit_code == 0, result.output
    assert "status invalid_input: input 'x' has shape [1, 3]" in result.output
    assert "0.31" in result.output


def test_stages_beyond_e2e_are_said(dead_url: str, tmp_path: Path) -> None:
    """Regression: queue at 200 % of e2e, and the negative rest hidden."""
    path = tmp_path / "result.json"
    path.write_text(json.dumps({"ingest_ms": 1, "queue_ms": 2, "e2e_ms": 1}))

    result = _trace(dead_url, path)

    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert "the stages add up to 3.00 ms, 2.00 ms more than e2e (1.00 ms)" in said


@pytest.mark.parametrize(
    "url", ["http://", "garbage", "localhost:16686", "ftp://jaeger", "http://[::1"]
)
def test_a_jaeger_url_without_scheme_or_host_is_refused(url: str) -> None:
    """Regression: `http://` printed "Jaeger at http:", `garbage` "UnsupportedProtocol"."""
    flag = CliRunner().invoke(app, ["trace", "r-1", "--jaeger", url])
    assert flag.exit_code == 2 and "not an http(s) URL with a host" in flag.stderr, flag.output

    env = CliRunner().invoke(app, ["traces"], env={"INFERBUS_JAEGER_URL": url})
    assert env.exit_code == 1, env.output
    assert env.stderr.startswith("error: INFERBUS_JAEGER_URL: ") and env.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("timings", "words"),
    [
        pytest.param({"e2e_ms": "abc"}, "`e2e_ms` is a string", id="string"),
        pytest.param({"e2e": [1]}, "`e2e` is a list", id="list"),
        pytest.param({"queue_ms": True}, "`queue_ms` is a boolean", id="bool"),
        pytest.param({"queue_ms": -0.5}, "`queue_ms` is -0.5", id="negative"),
        pytest.param({"queue_ms": float("nan")}, "`queue_ms` is nan", id="nan"),
        pytest.param({"queue_ms": 10**400}, "`queue_ms` is inf", id="beyond-float"),
    ],
)
def test_breakdown_from_timings_names_a_value_that_is_not_a_duration(
    timings: dict[str, object], words: str
) -> None:
    with pytest.raises(InvalidTimings, match=words):
        breakdown_from_timings("r-1", timings)

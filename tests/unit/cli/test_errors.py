"""Every expected CLI failure is one line on stderr and exit 1; a bug keeps its traceback."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from aiokafka.errors import KafkaConnectionError, UnknownTopicOrPartitionError
from pydantic import BaseModel, PositiveInt
from typer.testing import CliRunner

from schemas.errors import ModelNotFound
from services.cli.common import OneLineErrors, one_line
from services.cli.main import app
from services.models.demo import mlp_config
from tests.gone_reader import run_to_a_gone_reader


class _Port(BaseModel):
    port: PositiveInt


def _raise(exc: BaseException) -> None:
    raise exc


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        pytest.param(
            ModelNotFound("model 'x' is not in the repository", model="x"),
            "model 'x' is not in the repository (model=x)",
            id="inferbus-error",
        ),
        pytest.param(
            KafkaConnectionError(
                "Unable to bootstrap from [('127.0.0.1', 9, <AddressFamily.AF_INET: 2>)]"
            ),
            "cannot reach Kafka at 127.0.0.1:9; start the stack (`inferbus up`) or pass "
            "--bootstrap host:port (env INFERBUS_KAFKA_BOOTSTRAP)",
            id="kafka-unreachable",
        ),
        pytest.param(
            UnknownTopicOrPartitionError(),
            "Kafka refused: UnknownTopicOrPartitionError: [Error 3] UnknownTopicOrPartitionError",
            id="kafka-refusal",
        ),
        pytest.param(
            FileNotFoundError(errno.ENOENT, "No such file or directory", "/nope.csv"),
            "No such file or directory: /nope.csv",
            id="file-not-found",
        ),
        pytest.param(
            PermissionError(errno.EACCES, "Permission denied", "/etc/shadow"),
            "Permission denied: /etc/shadow",
            id="permission",
        ),
        pytest.param(
            TimeoutError("no result for request r-1 within 30 s"),
            "no result for request r-1 within 30 s",
            id="timeout",
        ),
        pytest.param(TimeoutError(), "timed out", id="bare-timeout"),
        pytest.param(
            ModelNotFound("first line\n  second line"), "first line second line", id="multi-line"
        ),
        pytest.param(None, "invalid _Port: port: Input should be greater than 0", id="validation"),
    ],
)
def test_expected_errors_become_one_line(exc: BaseException | None, expected: str) -> None:
    if exc is None:
        try:
            _Port(port=0)
        except ValueError as validation:
            exc = validation
    assert exc is not None
    probe = typer.Typer(cls=OneLineErrors)
    probe.command("fail")(lambda: _raise(exc))
    probe.command("other")(lambda: None)  # a group, as in the real CLI
    result = CliRunner().invoke(probe, ["fail"])
    assert result.exit_code == 1
    assert result.stderr == f"error: {expected}\n"
    assert one_line(exc) == expected


def test_a_bug_keeps_its_traceback() -> None:
    probe = typer.Typer(cls=OneLineErrors)
    probe.command("fail")(lambda: _raise(KeyError("bug")))
    probe.command("other")(lambda: None)
    result = CliRunner().invoke(probe, ["fail"])
    assert isinstance(result.exception, KeyError)
    assert one_line(KeyError("bug")) is None


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A model repository holding demo-mlp's model.yaml (no weights: nothing loads it)."""
    (tmp_path / "demo-mlp").mkdir()
    mlp_config().dump(tmp_path / "demo-mlp" / "model.yaml")
    return tmp_path


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        pytest.param(
            ["infer", "nosuch", "--json", '{"x": [[1]]}'],
            {},
            "error: input 'x': model 'nosuch' is not in ",
            id="infer-model-missing-locally",
        ),
        pytest.param(
            ["infer", "demo-mlp", "--json", '{"x": [[1, [2]]]}'],
            {},
            "error: input 'x' is not a float32 array",
            id="infer-ragged-input",
        ),
        pytest.param(
            ["infer", "demo-mlp", "--json", "[1]"],
            {},
            "error: --json: inputs must be a JSON object",
            id="infer-not-an-object",
        ),
        pytest.param(
            ["ingest"],
            {"INFERBUS_INGEST_TENANT_LIMITS": '{"team-a": 0}'},
            "error: INFERBUS_INGEST_TENANT_LIMITS (team-a.rate_rps): Input should be greater",
            id="ingest-bad-setting",
        ),
        pytest.param(
            ["worker", "--model", "demo-mlp"],
            {"INFERBUS_WORKER_MAX_IN_HAND": "lots"},
            "error: INFERBUS_WORKER_MAX_IN_HAND: Input should be a valid integer",
            id="worker-bad-setting",
        ),
        pytest.param(
            ["up", "--duration", "1", "--log-dir", "up-logs"],
            {"INFERBUS_INGEST_TENANT_LIMITS": '{"team-a": -1}'},
            "error: INFERBUS_INGEST_TENANT_LIMITS (team-a.rate_rps): Input should be greater",
            id="up-bad-ingest-setting",
        ),
        pytest.param(
            ["up", "--duration", "1", "--log-dir", "up-logs"],
            {"INFERBUS_WORKER_MAX_IN_HAND": "lots"},
            "error: INFERBUS_WORKER_MAX_IN_HAND: Input should be a valid integer",
            id="up-bad-worker-setting",
        ),
        pytest.param(
            ["up", "--duration", "1", "--log-dir", "up-logs"],
            {"INFERBUS_SCALER_POLICY": "nope"},
            "error: INFERBUS_SCALER_POLICY: Input should be 'slo', 'keda-lag' or 'hpa-util'",
            id="up-bad-scaler-policy",
        ),
        pytest.param(
            ["worker", "--model", "demo-mlp", "--lane", "foo"],
            {},
            "error: --lane: Input should be 'stable' or 'canary'",
            id="worker-bad-lane-flag",
        ),
        pytest.param(
            ["worker", "--model", "demo-mlp"],
            {"INFERBUS_WORKER_LANE": "foo"},
            "error: INFERBUS_WORKER_LANE: Input should be 'stable' or 'canary'",
            id="worker-bad-lane-variable",
        ),
        pytest.param(
            ["scaler", "run", "--policy", "nope"],
            {},
            "error: --policy: Input should be 'slo', 'keda-lag' or 'hpa-util'",
            id="scaler-bad-policy-flag",
        ),
        pytest.param(
            ["load", "--trace", "/nope/trace.csv", "--model", "demo-mlp"],
            {},
            "error: cannot read /nope/trace.csv: No such file or directory",
            id="load-trace-missing",
        ),
        pytest.param(
            ["load", "--scenario", "burst", "--model", "nosuch"],
            {},
            "error: model 'nosuch' is not in the model repository",
            id="load-model-missing",
        ),
        pytest.param(
            ["load", "--rate", "5", "--duration", "0", "--model", "demo-mlp"],
            {},
            "error: --duration must be a finite number > 0 seconds, not 0",
            id="load-duration-zero",
        ),
        pytest.param(
            ["load", "--scenario", "burst", "--duration", "3", "--model", "demo-mlp"],
            {},
            "error: --duration applies to --rate and --trace",
            id="load-scenario-with-duration",
        ),
        pytest.param(
            ["topics", "create", "--bootstrap", "127.0.0.1:1", "--models", "/nope/models"],
            {},
            "error: no model repository",
            id="topics-without-a-repository",
        ),
        pytest.param(
            ["models", "list", "--dir", "/nope/models"],
            {},
            "error: no model repository at /nope/models",
            id="models-list-without-a-repository",
        ),
    ],
)
def test_real_commands_fail_in_one_line(
    args: list[str],
    env: dict[str, str],
    expected: str,
    repo: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(repo.parent)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    models = ["--models", str(repo)] if args[0] in ("infer", "load", "up") else []
    result = CliRunner().invoke(app, [*args, *models])
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith(expected), result.stderr
    assert result.stderr.count("\n") == 1
    assert "Traceback" not in result.output


def test_an_unreachable_broker_is_one_line(repo: Path) -> None:
    """The issue's example: `inferbus infer` with nothing listening (takes the 5 s of retries)."""
    args = ["infer", "demo-mlp", "--json", '{"x": [[0.5]]}', "--bootstrap", "127.0.0.1:1"]
    result = CliRunner().invoke(app, [*args, "--models", str(repo)])
    assert result.exit_code == 1
    assert result.stderr == (
        "error: cannot reach Kafka at 127.0.0.1:1; start the stack (`inferbus up`) or pass "
        "--bootstrap host:port (env INFERBUS_KAFKA_BOOTSTRAP)\n"
    )


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["worker", "--model", "demo-mlp"], id="worker"),
        pytest.param(["ingest"], id="ingest"),
    ],
)
def test_a_service_that_cannot_reach_the_broker_exits_in_one_line(
    args: list[str], repo: Path, tmp_path: Path
) -> None:
    """Both hung for good after their start's retries (their stop told the registry through a
    producer that never started) and ignored SIGTERM; the run's 60 s limit tells a hang."""
    env = {**os.environ, "INFERBUS_KAFKA_BOOTSTRAP": "127.0.0.1:1"}
    command = [sys.executable, "-c", "from services.cli.main import main; main()", *args]
    done = subprocess.run(
        [*command, "--models", str(repo)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert done.returncode == 1, done.stderr[-2000:]
    assert done.stderr.rstrip().endswith(
        "error: cannot reach Kafka at 127.0.0.1:1; start the stack (`inferbus up`) or pass "
        "--bootstrap host:port (env INFERBUS_KAFKA_BOOTSTRAP)"
    )


@pytest.mark.parametrize("timeout", ["-1", "0"])
def test_a_timeout_that_is_no_wait_is_a_usage_error(timeout: str, repo: Path) -> None:
    """It was sent and refused by the request's schema (`timeout_ms: Input should be greater
    than 0`, exit 1), naming a field the user never wrote."""
    args = ["infer", "demo-mlp", "--json", '{"x": [[0.5]]}', "--timeout", timeout]
    result = CliRunner().invoke(app, [*args, "--models", str(repo), "--bootstrap", "127.0.0.1:1"])

    assert result.exit_code == 2
    assert "--timeout" in result.output and "0.001" in result.output


def test_up_refuses_a_bad_model_yaml_before_starting_anything(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It started the broker and created topics first, then stopped with the error last."""
    monkeypatch.chdir(repo.parent)
    path = repo / "demo-mlp" / "model.yaml"
    path.write_text(path.read_text().replace("max_batch_size: 32", "max_batch_size: -3"))
    args = ["up", "--duration", "1", "--log-dir", "up-logs", "--models", str(repo)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith("error: "), result.stderr
    assert "max_batch_size" in result.stderr
    assert "embedded broker" not in result.output


_BIG_OUTPUT = """
import typer
from services.cli.common import OneLineErrors
app = typer.Typer(cls=OneLineErrors)

@app.callback()
def main() -> None: ...

@app.command()
def big() -> None:
    for _ in range(2000):
        print("x" * 1000)

app()
"""


def test_a_reader_that_goes_ends_the_command_quietly() -> None:
    """`inferbus sim --help | head`: `error: [Errno 32] Broken pipe` on stderr, exit 1."""
    process = subprocess.Popen(
        [sys.executable, "-c", _BIG_OUTPUT, "big"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=Path(__file__).parents[3],
    )
    assert process.stdout is not None and process.stderr is not None
    process.stdout.read(10)
    process.stdout.close()  # the reader goes, as `head` does
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=30) == 141, stderr
    assert stderr == ""


@pytest.mark.parametrize("args", [["--help"], ["sim", "--help"]], ids=["help", "sim-help"])
def test_a_reader_that_goes_ends_rich_output_quietly_too(args: list[str]) -> None:
    """Regression: `inferbus --help | head` exited 1 (rich's own answer to a broken pipe)."""
    done = run_to_a_gone_reader(args)
    assert done.returncode == 141, done.stderr
    assert done.stderr == b""

"""Flags and settings an operator gets wrong are refused before anything starts, named.

Before: `up --workers 0` ran a stack with no workers, `--workers -1` started the broker
and the topics then failed on the scaler's budget, `--ingest 0` ran without ingest,
`--duration nan` or `0` never ended and `-1` ended at once, `--tiers ''` served every
tier, and a port out of range (`--port`, `--bootstrap host:abc`, a metrics port) was a
traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

import services.cli.main
import services.cli.stack
from services.cli.main import app


class Started(Exception):
    """The stack was made: the flags were taken."""


def _no_stack(*args: object, **kwargs: object) -> None:
    raise Started


@pytest.mark.parametrize(
    ("args", "named"),
    [
        pytest.param(["--workers", "0"], "--workers", id="workers-0"),
        pytest.param(["--workers", "-1"], "--workers", id="workers-negative"),
        pytest.param(["--ingest", "0"], "--ingest", id="ingest-0"),
        pytest.param(["--duration", "nan"], "--duration", id="duration-nan"),
        pytest.param(["--duration", "inf"], "--duration", id="duration-inf"),
        pytest.param(["--duration", "0"], "--duration", id="duration-0"),
        pytest.param(["--duration", "-1"], "--duration", id="duration-negative"),
        pytest.param(["--tiers", ""], "--tiers names no tier", id="tiers-empty"),
        pytest.param(["--tiers", "batch,batch"], "batch more than once", id="tiers-twice"),
        pytest.param(["--port", "70000"], "--port", id="port-too-high"),
        pytest.param(["--port", "-5"], "--port", id="port-negative"),
        pytest.param(["--bootstrap", "127.0.0.1:abc"], "--bootstrap", id="bootstrap-port"),
    ],
)
def test_up_refuses_a_bad_flag_before_it_starts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, args: list[str], named: str
) -> None:
    monkeypatch.setattr(services.cli.stack, "Stack", _no_stack)
    result = CliRunner().invoke(
        app, ["up", "--models", str(tmp_path / "m"), "--log-dir", str(tmp_path / "l"), *args]
    )
    assert result.exit_code == 2, result.output
    assert named in result.output


def test_up_takes_the_flags_it_should(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(services.cli.stack, "Stack", _no_stack)
    args = ["--workers", "2", "--duration", "1.5", "--tiers", "batch", "--port", "0"]
    result = CliRunner().invoke(
        app, ["up", "--models", str(tmp_path / "m"), "--log-dir", str(tmp_path / "l"), *args]
    )
    assert isinstance(result.exception, Started), result.output


@pytest.mark.parametrize(
    "command",
    [
        ["ingest", "-b", "127.0.0.1:abc"],
        ["worker", "-b", "localhost:"],
        ["scaler", "run", "-b", "127.0.0.1:70000"],
        ["topics", "create", "-b", "127.0.0.1:0"],
        ["broker", "--port", "70000"],
    ],
    ids=" ".join,
)
def test_a_service_refuses_an_address_that_is_no_port(command: list[str]) -> None:
    result = CliRunner().invoke(app, command)
    assert result.exit_code == 2, result.output
    assert "--bootstrap" in result.output or "--port" in result.output


@pytest.mark.parametrize(
    ("command", "said"),
    [
        (["worker", "--tier", "gold"], "--tier names 'gold', not a tier"),
        (["infer", "m", "--json", "{}", "--tier", "interactive,batch"], "--tier takes one tier"),
        (["infer", "m", "--json", "{}", "--tier", ""], "--tier names no tier"),
    ],
    ids=" ".join,
)
def test_a_tier_flag_that_names_no_tier_it_can_use_is_refused(
    command: list[str], said: str
) -> None:
    result = CliRunner().invoke(app, command)
    assert result.exit_code == 2, result.output
    assert said in " ".join(result.output.split())


@pytest.mark.parametrize(
    ("command", "variable"),
    [
        (["ingest"], "INFERBUS_INGEST_METRICS_PORT"),
        (["worker"], "INFERBUS_WORKER_METRICS_PORT"),
        (["scaler", "run"], "INFERBUS_SCALER_METRICS_PORT"),
    ],
)
@pytest.mark.parametrize("value", ["70000", "-1"])
def test_a_metrics_port_out_of_range_is_named(
    monkeypatch: pytest.MonkeyPatch, command: list[str], variable: str, value: str
) -> None:
    monkeypatch.setenv(variable, value)
    result = CliRunner().invoke(app, [*command, "-b", "127.0.0.1:19499"])
    assert result.exit_code == 1, result.output
    assert f"error: {variable}" in result.output


@pytest.mark.parametrize(
    ("env", "variable"),
    [
        ({"INFERBUS_BROKER_PORT": "abc"}, "INFERBUS_BROKER_PORT"),
        ({"INFERBUS_BROKER_PORT": "70000"}, "INFERBUS_BROKER_PORT"),
        ({"INFERBUS_BROKER_START_TIMEOUT_S": "nan"}, "INFERBUS_BROKER_START_TIMEOUT_S"),
        ({"INFERBUS_BROKER_START_TIMEOUT_S": "-1"}, "INFERBUS_BROKER_START_TIMEOUT_S"),
    ],
)
def test_the_broker_names_a_bad_variable(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], variable: str
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    result = CliRunner().invoke(app, ["broker"])
    assert result.exit_code == 1, result.output
    assert f"error: {variable}" in result.output


@pytest.mark.parametrize("flag", ["--models", "--log-dir"])
def test_up_refuses_a_file_where_a_folder_goes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, flag: str
) -> None:
    """Regression: `--models FILE` started the broker and the topics, then failed on
    `FILE/demo-mlp`; `--log-dir FILE` said `File exists`, naming no flag."""
    monkeypatch.setattr(services.cli.stack, "Stack", _no_stack)
    folders = {"--models": str(tmp_path / "m"), "--log-dir": str(tmp_path / "l")}
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    folders[flag] = str(a_file)
    args = [item for pair in folders.items() for item in pair]
    result = CliRunner().invoke(app, ["up", *args])
    assert result.exit_code == 2, result.output
    assert flag in result.output and "a-file" in result.output


@pytest.mark.parametrize(
    ("command", "variable", "value"),
    [
        (["worker"], "INFERBUS_WORKER_DRAIN_TIMEOUT_S", "inf"),
        (["worker"], "INFERBUS_WORKER_MODEL", ""),
        (["ingest"], "INFERBUS_INGEST_LEASE_S", "inf"),
        (["ingest"], "INFERBUS_INGEST_PUBLISH_PATIENCE_S", "nan"),
        (["scaler", "run"], "INFERBUS_SCALER_INTERVAL_S", "inf"),
        (["scaler", "run"], "INFERBUS_SCALER_SCALE_DOWN_WINDOW_S", "inf"),
    ],
)
def test_a_duration_that_never_ends_or_an_empty_name_is_named(
    monkeypatch: pytest.MonkeyPatch, command: list[str], variable: str, value: str
) -> None:
    """Regression: `INFERBUS_WORKER_DRAIN_TIMEOUT_S=inf` made a worker's stop unbounded,
    `INFERBUS_SCALER_INTERVAL_S=inf` a scaler that decided once; both were taken."""
    monkeypatch.setenv(variable, value)
    result = CliRunner().invoke(app, [*command, "-b", "127.0.0.1:19499"])
    assert result.exit_code == 1, result.output
    assert f"error: {variable}" in result.output


@pytest.mark.parametrize("service", [["ingest"], ["worker", "--model", "demo-mlp"]])
@pytest.mark.parametrize("where", ["missing", "a-file"])
def test_a_service_refuses_a_repository_that_is_not_a_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, service: list[str], where: str
) -> None:
    """Regression: `inferbus ingest --models /typo` ran, answering every request
    `model_not_found`, and said nothing about the folder."""
    models = tmp_path / where
    if where == "a-file":
        models.write_text("not a folder")

    def started(coro: object) -> None:
        getattr(coro, "close", lambda: None)()
        raise Started

    monkeypatch.setattr(services.cli.main, "run_service", started)
    result = CliRunner().invoke(app, [*service, "--models", str(models), "-b", "localhost:1"])
    assert result.exit_code == 1, result.output
    assert (
        f"error: no model repository (`inferbus models init` makes one; or --models DIR): {models}"
        in result.output
    )


def test_a_service_takes_a_repository_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def started(coro: object) -> None:
        getattr(coro, "close", lambda: None)()
        raise Started

    monkeypatch.setattr(services.cli.main, "run_service", started)
    result = CliRunner().invoke(app, ["ingest", "--models", str(tmp_path), "-b", "localhost:1"])
    assert isinstance(result.exception, Started), result.output


@pytest.mark.parametrize(
    ("text", "said"),
    [
        pytest.param("{", "--json is not valid JSON: Expecting", id="not-json"),
        pytest.param(
            "[" * 100_000 + "]" * 100_000,
            "--json is not valid JSON: nested deeper than it reads",
            id="nested-past-the-stack",
        ),
    ],
)
def test_infer_refuses_inputs_that_are_no_json_before_it_connects(
    tmp_path: Path, text: str, said: str
) -> None:
    inputs = tmp_path / "in.json"
    inputs.write_text(text)
    result = CliRunner().invoke(app, ["infer", "m", "--json", f"@{inputs}", "-b", "127.0.0.1:1"])
    assert result.exit_code == 2, result.output
    assert said in " ".join(result.output.split())
    assert "Traceback" not in result.output

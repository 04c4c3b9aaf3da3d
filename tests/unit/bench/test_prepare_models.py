"""`bench throughput --engine`: the private copy of the repository serves what was asked."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
import yaml

from schemas.errors import ModelNotFound
from services.bench.throughput import ThroughputOptions, prepare_models
from services.models.demo import write_demo_models


@pytest.mark.parametrize(
    ("engine", "kind", "a_ms", "b_ms"),
    [
        ("model", "onnxruntime", 3.0, 6.9),
        ("null", "sim", 0.0, 0.0),
        ("sim", "sim", 3.0, 6.9),
    ],
)
def test_the_copy_serves_the_engine_asked_for(
    tmp_path: Path, engine: str, kind: str, a_ms: float, b_ms: float
) -> None:
    write_demo_models(tmp_path)
    path = tmp_path / "demo-encoder" / "model.yaml"
    raw = yaml.safe_load(path.read_text())
    raw["engine"]["sim"] = {**raw["engine"]["sim"], "a_ms": 3.0, "b_ms": 6.9, "per": "sample"}
    path.write_text(yaml.safe_dump(raw, sort_keys=False))

    copy = prepare_models(ThroughputOptions(models_dir=tmp_path, engine=engine))
    try:
        served = yaml.safe_load((copy / "demo-encoder" / "model.yaml").read_text())
        assert served["engine"]["kind"] == kind
        assert (served["engine"]["sim"]["a_ms"], served["engine"]["sim"]["b_ms"]) == (a_ms, b_ms)
        assert yaml.safe_load(path.read_text()) == raw, "the user's repository is untouched"
    finally:
        shutil.rmtree(copy)


def test_a_repository_without_the_model_is_refused_and_nothing_is_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It once fell back to fresh demo models: `--models` naming the wrong folder measured
    demo-encoder, and a model not in it left a copy behind in /tmp."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    empty = tmp_path / "empty"
    empty.mkdir()

    with pytest.raises(ModelNotFound, match="demo-encoder"):
        prepare_models(ThroughputOptions(models_dir=empty))

    assert list(scratch.iterdir()) == []

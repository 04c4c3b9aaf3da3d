"""ModelRepository re-reads model.yaml only when the file changed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from infra.models import repository as repository_module
from infra.models.config import ModelConfig, ModelConfigError
from infra.models.repository import ModelRepository
from schemas.errors import ModelNotFound
from services.models.demo import write_demo_models


@pytest.fixture
def root(tmp_path: Path) -> Path:
    write_demo_models(tmp_path)
    return tmp_path


def test_an_unchanged_model_yaml_is_parsed_once(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loads: list[Path] = []
    real = ModelConfig.load

    def counting(path: Path) -> ModelConfig:
        loads.append(path)
        return real(path)

    monkeypatch.setattr(repository_module.ModelConfig, "load", counting)
    repo = ModelRepository(root)
    first = repo.config("demo-mlp")
    assert repo.config("demo-mlp") is first
    assert len(loads) == 1


def test_a_changed_model_yaml_is_parsed_again(root: Path) -> None:
    repo = ModelRepository(root)
    path = root / "demo-mlp" / "model.yaml"
    before = repo.config("demo-mlp")
    path.write_text(path.read_text() + "\n# edited\n")
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    after = repo.config("demo-mlp")
    assert after is not before
    assert after == before  # a comment changes nothing in the config


def test_a_removed_model_is_not_found_even_when_cached(root: Path) -> None:
    repo = ModelRepository(root)
    repo.config("demo-mlp")
    (root / "demo-mlp" / "model.yaml").unlink()
    with pytest.raises(ModelNotFound):
        repo.config("demo-mlp")


def test_a_model_yaml_that_is_a_folder_is_said_so(tmp_path: Path) -> None:
    """`names()` lists it; `config` said "not in the repository" of a model it had listed."""
    (tmp_path / "x" / "model.yaml").mkdir(parents=True)
    repo = ModelRepository(tmp_path)
    assert repo.names() == ["x"]
    with pytest.raises(ModelConfigError, match=r"x/model.yaml is not a file"):
        repo.config("x")
    with pytest.raises(ModelNotFound):
        repo.config("y")

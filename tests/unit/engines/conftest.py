"""Fixtures for engine tests: the demo repository and model versions with edited configs."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.models.repository import ModelRepository, ModelVersion


@pytest.fixture
def edited_model(demo_models: Path, tmp_path: Path) -> Callable[..., ModelVersion]:
    """Copy a demo model into tmp_path with its model.yaml `engine` section updated."""

    def make(name: str, engine: dict[str, Any] | None = None, **top: Any) -> ModelVersion:
        target = tmp_path / "models" / name
        shutil.copytree(demo_models / name, target)
        path = target / "model.yaml"
        raw = yaml.safe_load(path.read_text())
        raw["engine"].update(engine or {})
        raw.update(top)
        path.write_text(yaml.safe_dump(raw, sort_keys=False))
        return ModelRepository(tmp_path / "models").resolve(name)

    return make

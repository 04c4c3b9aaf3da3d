"""A minimal sim model on disk (model.yaml and empty version folders) for rollout tests."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml


def write_sim_model(
    root: Path,
    name: str = "m",
    *,
    versions: Sequence[str] = ("1", "2"),
    rollout: Any = None,
    tiers: list[str] | None = None,
) -> Path:
    """Write `root/name` (x: float32 [-1, 4] -> y: float32 [-1, 2], sim engine); returns
    its model.yaml. `rollout` is written as given (None: null); `tiers` only when given."""
    folder = root / name
    for version in versions:
        (folder / version).mkdir(parents=True)
    raw: dict[str, Any] = {
        "inputs": [{"name": "x", "dtype": "float32", "shape": [-1, 4]}],
        "outputs": [{"name": "y", "dtype": "float32", "shape": [-1, 2]}],
        "engine": {"kind": "sim"},
        "rollout": rollout,
    }
    if tiers is not None:
        raw["tiers"] = tiers
    path = folder / "model.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path

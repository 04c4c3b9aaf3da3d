"""Generate the committed JSON Schemas of the wire format from the pydantic models."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel

from schemas.request import InferenceRequest
from schemas.result import InferenceResult
from schemas.rollout import RolloutRecord

SCHEMA_DIR = Path(__file__).parent / "json"
MODELS: dict[str, type[BaseModel]] = {
    "InferenceRequest.v1.json": InferenceRequest,
    "InferenceResult.v1.json": InferenceResult,
    "RolloutRecord.v1.json": RolloutRecord,
}


def render() -> dict[str, str]:
    """File name → JSON Schema text, deterministic."""
    return {
        name: json.dumps(model.model_json_schema(), indent=2, sort_keys=True) + "\n"
        for name, model in MODELS.items()
    }


def write(directory: Path = SCHEMA_DIR) -> list[Path]:
    """Write every schema file; returns the paths written."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, text in render().items():
        path = directory / name
        path.write_text(text)
        paths.append(path)
    return paths


if __name__ == "__main__":
    for written in write():
        print(written)

"""Generate the committed JSON Schemas of the wire format from the pydantic models."""

from __future__ import annotations

import argparse
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


def main(argv: list[str] | None = None) -> None:
    """`python -m schemas.jsonschema [--out DIR]`: write the schema files, print their paths."""
    parser = argparse.ArgumentParser(
        prog="python -m schemas.jsonschema",
        description="Write the wire format's JSON Schemas from the pydantic models.",
    )
    parser.add_argument("--out", type=Path, default=SCHEMA_DIR, help=f"default: {SCHEMA_DIR}")
    args = parser.parse_args(argv)
    for written in write(args.out):
        print(written)


if __name__ == "__main__":
    main()

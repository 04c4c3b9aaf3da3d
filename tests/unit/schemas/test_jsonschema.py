"""The committed JSON Schemas are what the pydantic models generate (regenerate on change)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from schemas import jsonschema

REGENERATE = "run `python -m schemas.jsonschema` and commit schemas/json/"


@pytest.mark.parametrize("name", sorted(jsonschema.MODELS))
def test_committed_schema_is_current(name: str) -> None:
    committed = jsonschema.SCHEMA_DIR / name

    assert committed.is_file(), f"{committed} is missing: {REGENERATE}"
    assert committed.read_text() == jsonschema.render()[name], f"{name} is stale: {REGENERATE}"


def test_no_stray_schema_files() -> None:
    assert sorted(p.name for p in jsonschema.SCHEMA_DIR.glob("*.json")) == sorted(jsonschema.MODELS)


def test_render_is_deterministic_and_valid_json() -> None:
    first, second = jsonschema.render(), jsonschema.render()

    assert first == second
    for text in first.values():
        assert json.loads(text)["type"] == "object"


def test_write_produces_the_rendered_files(tmp_path: Path) -> None:
    written = jsonschema.write(tmp_path)

    assert {p.name for p in written} == set(jsonschema.MODELS)
    for path in written:
        assert path.read_text() == jsonschema.render()[path.name]


@pytest.mark.parametrize(
    ("name", "required"),
    [
        pytest.param("InferenceRequest.v1.json", {"request_id", "model", "inputs"}, id="request"),
        pytest.param("InferenceResult.v1.json", {"request_id", "model", "status"}, id="result"),
    ],
)
def test_required_fields_of_the_wire_format(name: str, required: set[str]) -> None:
    schema = json.loads(jsonschema.render()[name])

    assert set(schema["required"]) == required

"""A YAML mapping that writes a key twice is refused, naming the key and its line."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from infra.models.config import ModelConfig, ModelConfigError
from infra.yaml_unique import safe_load_unique


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("a: 1\nb: 2\n", {"a": 1, "b": 2}, id="plain"),
        pytest.param("a: {x: 1}\nb: {x: 2}\n", {"a": {"x": 1}, "b": {"x": 2}}, id="same-key-apart"),
        pytest.param(
            "base: &b {x: 1, y: 2}\nc:\n  <<: *b\n  x: 3\n",
            {"base": {"x": 1, "y": 2}, "c": {"x": 3, "y": 2}},
            id="merge-then-override",
        ),
        pytest.param("", None, id="empty"),
    ],
)
def test_what_safe_load_takes_is_read_as_it(text: str, expected: object) -> None:
    assert safe_load_unique(text) == expected


@pytest.mark.parametrize(
    ("text", "key", "line"),
    [
        pytest.param("replicas: 1\nreplicas: 4\n", "'replicas'", 2, id="top-level"),
        pytest.param(
            "batching:\n  max_batch_size: 8\n  max_batch_size: 32\n",
            "'max_batch_size'",
            3,
            id="nested",
        ),
        pytest.param("a: {x: 1, x: 2}\n", "'x'", 1, id="flow"),
    ],
)
def test_a_key_written_twice_is_refused_with_its_line(text: str, key: str, line: int) -> None:
    with pytest.raises(yaml.YAMLError) as caught:
        safe_load_unique(text)
    message = str(caught.value)
    assert f"found {key} written twice" in message
    assert f"line {line}," in message


def test_a_model_yaml_with_a_repeated_key_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "m" / "model.yaml"
    path.parent.mkdir()
    path.write_text("inputs: []\noutputs: []\nreplicas: {min: 1}\nreplicas: {min: 4}\n")
    with pytest.raises(ModelConfigError, match="'replicas' written twice"):
        ModelConfig.load(path)

"""model.yaml validation: each broken field is refused with a message that names it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.models.config import ModelConfig, ModelConfigError


def _base() -> dict[str, Any]:
    return {
        "inputs": [
            {"name": "input_ids", "dtype": "int64", "shape": [-1, -1]},
            {"name": "attention_mask", "dtype": "int64", "shape": [-1, -1]},
        ],
        "outputs": [{"name": "embedding", "dtype": "float32", "shape": [-1, 8]}],
        "tokenizer": {"file": "tokenizer.json"},
        "batching": {"sequence_input": "input_ids", "length_buckets": [32, 64]},
    }


def _write(tmp_path: Path, raw: Any, name: str = "m") -> Path:
    path = tmp_path / name / "model.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(raw if isinstance(raw, str) else yaml.safe_dump(raw))
    return path


def _with(**changes: Any) -> dict[str, Any]:
    raw = _base()
    for dotted, value in changes.items():
        *parents, leaf = dotted.split("__")
        node = raw
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return raw


CASES = [
    pytest.param("inputs: [", "not valid YAML", id="bad-yaml"),
    pytest.param("- a\n- b\n", "must hold a mapping", id="not-a-mapping"),
    pytest.param(_with(inputs=[]), "inputs", id="no-inputs"),
    pytest.param(
        _with(inputs=[{"name": "x", "dtype": "complex64", "shape": [-1]}]), "dtype", id="bad-dtype"
    ),
    pytest.param(_with(batching__length_buckets=[64, 32]), "ascending", id="buckets-unsorted"),
    pytest.param(
        _with(batching__sequence_input="nope"), "sequence_input 'nope'", id="seq-not-an-input"
    ),
    pytest.param(
        _with(batching__preferred_batch_sizes=[64]), "cannot exceed", id="preferred-too-big"
    ),
    pytest.param(_with(replicas={"min": 3, "max": 2}), "replicas.min 3", id="replicas"),
    pytest.param(_with(engine__kind="tvm"), "engine.kind", id="engine-kind"),
    pytest.param(_with(engine__providers=["rocm"]), "engine.providers", id="unknown-provider"),
    pytest.param(_with(engine__providers=[]), "at least one", id="no-providers"),
    pytest.param(_with(engine__providers=["cpu", "cpu"]), "repeat", id="providers-repeat"),
    pytest.param(_with(engine__sim={"a_ms": -1}), "engine.sim.a_ms", id="sim-negative"),
    pytest.param(_with(engine__sim={"per": "batch"}), "engine.sim.per", id="sim-per"),
    pytest.param(
        _with(engine__profile_min={"input_ids": [1, 1]}),
        "needs all of min, opt and max",
        id="profile-partial",
    ),
    pytest.param(
        _with(
            engine__profile_min={"input_ids": [1, 64]},
            engine__profile_opt={"input_ids": [1, 32]},
            engine__profile_max={"input_ids": [1, 128]},
        ),
        "min <= opt <= max",
        id="profile-order",
    ),
    pytest.param(
        _with(
            engine__profile_min={"nope": [1]},
            engine__profile_opt={"nope": [1]},
            engine__profile_max={"nope": [1]},
        ),
        "not an input",
        id="profile-unknown-input",
    ),
    pytest.param(
        _with(
            engine__profile_min={"input_ids": [1]},
            engine__profile_opt={"input_ids": [1]},
            engine__profile_max={"input_ids": [1]},
        ),
        "has 1 dims",
        id="profile-rank",
    ),
    pytest.param(
        _with(tokenizer={"attention_mask": "mask"}), "tokenizer.attention_mask", id="tok-mask"
    ),
    pytest.param(_with(tokenizer={"max_length": 0}), "tokenizer.max_length", id="tok-max-length"),
    pytest.param(_with(engine__workspace_mb=0), "workspace_mb", id="workspace"),
    pytest.param(_with(surprise=1), "surprise", id="unknown-field"),
    pytest.param(_with(name="other"), "differs from its folder", id="name-mismatch"),
    pytest.param(_with(name="Bad Name"), "lower-case", id="illegal-name"),
]


@pytest.mark.parametrize(("raw", "message"), CASES)
def test_invalid_model_yaml_is_refused_by_name(tmp_path: Path, raw: Any, message: str) -> None:
    path = _write(tmp_path, raw)
    with pytest.raises(ModelConfigError) as caught:
        ModelConfig.load(path)
    assert message in str(caught.value)
    assert str(path) in str(caught.value)


def test_valid_config_with_engine_extras(tmp_path: Path) -> None:
    raw = _with(
        engine__fp16=True,
        engine__device_id=1,
        engine__workspace_mb=1024,
        engine__provider_options={"cuda": {"gpu_mem_limit": 2048}},
        engine__profile_min={"input_ids": [1, 1]},
        engine__profile_opt={"input_ids": [8, 32]},
        engine__profile_max={"input_ids": [32, 64]},
    )
    config = ModelConfig.load(_write(tmp_path, raw))
    assert config.engine.device_id == 1
    assert config.engine.provider_options["cuda"]["gpu_mem_limit"] == 2048
    assert config.engine.providers == ["tensorrt", "cuda", "cpu"]

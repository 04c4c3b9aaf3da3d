"""Native TensorRT parts that need no GPU: cache keys, profiles, the missing-package error."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

import pytest

from infra.models.repository import ModelRepository, ModelVersion
from schemas.errors import EngineError
from services.models.demo import ENCODER, MLP
from services.worker.engines import create_engine
from services.worker.engines.shapes import Profile, profiles
from services.worker.engines.tensorrt_native import (
    GpuIdentity,
    TensorRTEngine,
    engine_cache_key,
    file_sha256,
)

H200 = GpuIdentity("NVIDIA H200", "9.0", "10.8.0")
SHAPES = {"x": Profile((1, 16), (32, 16), (32, 16))}


@pytest.mark.parametrize(
    ("gpu", "fp16", "shapes"),
    [
        (GpuIdentity("NVIDIA A100", "8.0", "10.8.0"), False, SHAPES),
        (GpuIdentity("NVIDIA H200", "9.0", "10.9.0"), False, SHAPES),
        (H200, True, SHAPES),
        (H200, False, {"x": Profile((1, 16), (8, 16), (32, 16))}),
    ],
    ids=["other-gpu", "other-tensorrt", "fp16", "other-profile"],
)
def test_cache_key_changes_with_what_invalidates_an_engine(
    gpu: GpuIdentity, fp16: bool, shapes: dict[str, Profile]
) -> None:
    base = engine_cache_key("ab" * 32, H200, fp16=False, shapes=SHAPES)
    assert engine_cache_key("ab" * 32, H200, fp16=False, shapes=SHAPES) == base
    assert engine_cache_key("ab" * 32, gpu, fp16=fp16, shapes=shapes) != base
    assert engine_cache_key("cd" * 32, H200, fp16=False, shapes=SHAPES) != base


def test_file_hash_follows_content(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_bytes(b"one")
    b.write_bytes(b"two")
    assert file_sha256(a) != file_sha256(b)
    assert len(file_sha256(a)) == 64


def test_profiles_from_config_and_derived(
    demo_models: Path, edited_model: Callable[..., ModelVersion]
) -> None:
    encoder = profiles(ModelRepository(demo_models).resolve(ENCODER).config)
    assert encoder["input_ids"] == Profile((1, 1), (32, 32), (32, 512))
    mlp = profiles(ModelRepository(demo_models).resolve(MLP).config)
    assert mlp["x"] == Profile((1, 16), (32, 16), (32, 16))
    derived = edited_model(ENCODER, {"profile_min": {}, "profile_opt": {}, "profile_max": {}})
    assert profiles(derived.config)["attention_mask"] == Profile((1, 1), (32, 32), (32, 512))


@pytest.mark.skipif(
    importlib.util.find_spec("tensorrt") is not None, reason="tensorrt is installed here"
)
def test_missing_tensorrt_is_a_clear_engine_error(
    edited_model: Callable[..., ModelVersion],
) -> None:
    engine = create_engine(edited_model(ENCODER, {"kind": "tensorrt"}))
    assert isinstance(engine, TensorRTEngine)
    with pytest.raises(EngineError, match=r"tensorrt not installed.*pip install -e '\.\[gpu\]'"):
        engine.load()
    engine.unload()

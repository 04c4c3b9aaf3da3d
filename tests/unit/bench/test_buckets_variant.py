"""The one-bucket variant of demo-encoder that `bench buckets` compares against."""

from __future__ import annotations

from pathlib import Path

from infra.models.config import ModelConfig
from infra.models.repository import ModelRepository
from services.bench.buckets import FLAT, write_flat_variant
from services.models.demo import write_demo_models


def test_flat_variant_is_demo_encoder_without_buckets(tmp_path: Path) -> None:
    write_demo_models(tmp_path)
    write_flat_variant(tmp_path)
    flat = ModelRepository(tmp_path).config(FLAT)
    original = ModelConfig.load(tmp_path / "demo-encoder" / "model.yaml")
    assert flat.name == FLAT
    assert flat.batching.length_buckets == []
    assert original.batching.length_buckets, "the original keeps its buckets"
    assert flat.inputs == original.inputs
    assert ModelRepository(tmp_path).versions(FLAT) == ["1"]

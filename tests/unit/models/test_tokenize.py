"""Text inputs to ids and masks with the demo tokenizer; failures are InvalidInput."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from infra.models.config import ModelConfigError
from infra.models.repository import ModelRepository
from infra.models.tokenize import TextTokenizer
from schemas.errors import InvalidInput
from schemas.tensors import TextInput
from services.models.demo import ENCODER


@pytest.fixture(scope="module")
def tokenizer(demo_models: Path) -> TextTokenizer:
    return TextTokenizer.for_model(ModelRepository(demo_models).resolve(ENCODER))


def test_pads_to_longest_with_mask(tokenizer: TextTokenizer) -> None:
    arrays = tokenizer.encode(["hello world", "a much longer sentence about nothing"])
    ids, mask = arrays["input_ids"], arrays["attention_mask"]
    assert set(arrays) == {"input_ids", "attention_mask"}
    assert ids.dtype == mask.dtype == np.int64
    assert ids.shape == mask.shape
    assert mask[0].sum() < mask[1].sum() == ids.shape[1]
    assert (ids[0][mask[0] == 0] == 0).all()


def test_pad_to_bucket(tokenizer: TextTokenizer) -> None:
    arrays = tokenizer.encode_inputs(TextInput(text="hello"), pad_to=32)
    assert arrays["input_ids"].shape == (1, 32)
    with pytest.raises(InvalidInput, match="more than pad_to"):
        tokenizer.encode(["word " * 40], pad_to=8)


def test_truncates_to_max_length(tokenizer: TextTokenizer) -> None:
    assert tokenizer.encode(["word " * 3000])["input_ids"].shape == (1, 512)


@pytest.mark.parametrize(
    ("texts", "match"),
    [([], "no text"), ([3], "not a string"), (["   "], "no tokens")],
    ids=["empty-batch", "not-a-string", "whitespace-only"],
)
def test_bad_text_is_invalid_input(tokenizer: TextTokenizer, texts: list, match: str) -> None:
    with pytest.raises(InvalidInput, match=match):
        tokenizer.encode(texts)


def test_special_tokens_wrap_the_text(tokenizer: TextTokenizer) -> None:
    ids = tokenizer.token_ids(["x"])
    assert ids[0][0] == 2
    assert ids[0][-1] == 3


def test_missing_tokenizer_file(demo_models: Path, tmp_path: Path) -> None:
    shutil.copytree(demo_models / ENCODER, tmp_path / ENCODER)
    (tmp_path / ENCODER / "tokenizer.json").unlink()
    with pytest.raises(ModelConfigError, match="cannot load tokenizer"):
        TextTokenizer.for_model(ModelRepository(tmp_path).resolve(ENCODER))


def test_tokenized_text_runs_through_the_encoder(
    demo_models: Path, tokenizer: TextTokenizer
) -> None:
    model = ModelRepository(demo_models).resolve(ENCODER)
    session = ort.InferenceSession(str(model.model_file), providers=["CPUExecutionProvider"])
    short = session.run(None, tokenizer.encode(["the quick brown fox"]))[0]
    bucketed = session.run(None, tokenizer.encode(["the quick brown fox"], pad_to=64))[0]
    np.testing.assert_allclose(short, bucketed, atol=1e-4)

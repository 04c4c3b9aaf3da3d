"""Text inputs to `input_ids` / `attention_mask` arrays with the model's `tokenizer.json`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from infra.models.config import ModelConfigError, TokenizerConfig
from infra.models.repository import ModelVersion
from schemas.errors import InvalidInput
from schemas.tensors import Arrays, TextInput


def tokenizer_path(model: ModelVersion) -> Path:
    """The version folder's tokenizer file if it has one, else the model folder's."""
    config = model.config.tokenizer
    if config is None:
        raise ModelConfigError(f"model {model.name!r} declares no tokenizer", model=model.name)
    in_version = model.directory / config.file
    return in_version if in_version.is_file() else model.directory.parent / config.file


class TextTokenizer:
    """A loaded `tokenizers.Tokenizer` that truncates to `max_length` and pads with numpy."""

    def __init__(self, path: Path, config: TokenizerConfig, *, pad_token_id: int = 0) -> None:
        from tokenizers import Tokenizer

        try:
            self._tokenizer = Tokenizer.from_file(str(path))
        except Exception as exc:  # tokenizers raises plain Exception for unreadable files
            raise ModelConfigError(f"cannot load tokenizer {path}: {exc}", path=str(path)) from exc
        self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(max_length=config.max_length)
        self.config = config
        self.pad_token_id = pad_token_id

    @property
    def vocab_size(self) -> int:
        """Ids it can give: 0 to this minus one (added tokens included)."""
        return int(self._tokenizer.get_vocab_size(with_added_tokens=True))

    @classmethod
    def for_model(cls, model: ModelVersion) -> TextTokenizer:
        """The tokenizer model.yaml names; ModelConfigError if it is missing or unreadable."""
        config = model.config.tokenizer
        if config is None:
            raise ModelConfigError(f"model {model.name!r} declares no tokenizer", model=model.name)
        return cls(tokenizer_path(model), config, pad_token_id=model.config.batching.pad_token_id)

    def token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Ids per text, truncated, unpadded; InvalidInput if a text cannot be tokenized."""
        if not texts:
            raise InvalidInput("no text to tokenize")
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise InvalidInput(f"text sample {i} is a {type(text).__name__}, not a string")
        try:
            encodings = self._tokenizer.encode_batch(list(texts))
        except Exception as exc:  # the Rust side reports every failure as a plain Exception
            raise InvalidInput(f"tokenization failed: {exc}") from exc
        for i, encoding in enumerate(encodings):
            if all(encoding.special_tokens_mask):
                raise InvalidInput(f"text sample {i} produced no tokens (blank text?)")
        return [list(encoding.ids) for encoding in encodings]

    def encode(self, texts: Sequence[str], *, pad_to: int | None = None) -> Arrays:
        """Arrays named as model.yaml says, padded to the longest text or to `pad_to`."""
        ids = self.token_ids(texts)
        longest = max(len(sample) for sample in ids)
        length = longest if pad_to is None else pad_to
        if length < longest:
            raise InvalidInput(f"a text has {longest} tokens, more than pad_to={pad_to}")
        return pad(ids, length, self.config, pad_token_id=self.pad_token_id)

    def encode_inputs(self, text: TextInput, *, pad_to: int | None = None) -> Arrays:
        """`encode` for a request's `TextInput`."""
        return self.encode(text.texts(), pad_to=pad_to)


def pad(
    ids: Sequence[Sequence[int]], length: int, config: TokenizerConfig, *, pad_token_id: int = 0
) -> Arrays:
    """Right-pad token ids to `length`: ids, a 1/0 mask and zero token types, all int64."""
    batch = len(ids)
    input_ids = np.full((batch, length), pad_token_id, dtype=np.int64)
    mask = np.zeros((batch, length), dtype=np.int64)
    for row, sample in enumerate(ids):
        input_ids[row, : len(sample)] = sample
        mask[row, : len(sample)] = 1
    arrays: Arrays = {config.input_ids: input_ids}
    if config.attention_mask is not None:
        arrays[config.attention_mask] = mask
    if config.token_type_ids is not None:
        arrays[config.token_type_ids] = np.zeros((batch, length), dtype=np.int64)
    return arrays

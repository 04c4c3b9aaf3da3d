"""Request events for any model in the repository, pre-encoded so sending costs little CPU.

Each (tier, input length) gets a few binary-frame templates built from the model's
model.yaml; a request is a template with its id swapped in. Templates carry no
`created_at`: a request's `timeout_ms` runs from the moment it is produced.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from infra.models.config import ModelConfig, TensorSpec
from schemas.request import InferenceRequest
from schemas.topics import Tier
from services.client.wire import InputValue, WireRequest, to_frame_inputs

ID_SLOT = "0" * 32
"""Where the request id goes; uuid4().hex has the same length, so the frame stays valid."""


def sequence_length_input(config: ModelConfig) -> str | None:
    """The input whose axis 1 is the sequence (for length buckets), if the model has one."""
    if config.batching.sequence_input is not None:
        return config.batching.sequence_input
    if config.tokenizer is not None:
        return config.tokenizer.input_ids
    return None


def max_input_tokens(config: ModelConfig) -> int:
    """The longest input the model takes: its largest length bucket, else the tokenizer's."""
    if config.batching.length_buckets:
        return config.batching.length_buckets[-1]
    if config.tokenizer is not None:
        return config.tokenizer.max_length
    return 512


def _shape(spec: TensorSpec, tokens: int, sequence: bool) -> list[int]:
    shape = [1]
    for axis, dim in enumerate(spec.shape[1:], start=1):
        if dim != -1:
            shape.append(dim)
        else:
            shape.append(tokens if sequence and axis == 1 else 1)
    return shape


def sample_inputs(
    config: ModelConfig, tokens: int, rng: np.random.Generator
) -> dict[str, InputValue]:
    """One sample of every input: token ids of length `tokens` on the sequence input (and
    every other input with a dynamic axis 1, e.g. the attention mask), ones for a mask,
    noise for floats."""
    sequence = sequence_length_input(config)
    mask = config.tokenizer.attention_mask if config.tokenizer else "attention_mask"
    out: dict[str, InputValue] = {}
    for spec in config.inputs:
        seq_axis = sequence is not None and len(spec.shape) > 1 and spec.shape[1] == -1
        shape = _shape(spec, tokens, seq_axis)
        array: np.ndarray[Any, Any]
        if spec.dtype == "bool" or spec.name == mask:
            array = np.ones(shape, dtype=spec.dtype)
        elif spec.name == sequence:
            array = rng.integers(5, 1000, size=shape).astype(spec.dtype)
        elif spec.dtype.startswith(("int", "uint")):
            array = np.zeros(shape, dtype=spec.dtype)
        else:
            array = rng.standard_normal(shape).astype(spec.dtype)
        out[spec.name] = array
    return out


class EventFactory:
    """`factory(request_id, tier, tokens)` -> the bytes to produce to the tier's ingest topic."""

    def __init__(
        self,
        config: ModelConfig,
        *,
        tenant: str | None,
        reply_to: str,
        timeout_ms: dict[Tier, int],
        seed: int = 1,
        variants: int = 4,
    ) -> None:
        self.config = config
        self.tenant = tenant
        self.reply_to = reply_to
        self.timeout_ms = timeout_ms
        self.variants = variants
        self.uses_length = sequence_length_input(config) is not None
        self._rng = np.random.default_rng(seed)
        self._templates: dict[tuple[Tier, int], list[bytes]] = {}
        self._next = 0

    def _template(self, tier: Tier, tokens: int) -> bytes:
        inputs, payload = to_frame_inputs(sample_inputs(self.config, tokens, self._rng))
        envelope = InferenceRequest(
            request_id=ID_SLOT,
            model=self.config.name,
            tier=tier,
            inputs=inputs,
            timeout_ms=self.timeout_ms[tier],
            reply_to=self.reply_to,
            tenant=self.tenant,
        )
        value, _ = WireRequest(envelope, tuple(payload)).encode()
        return value

    def __call__(self, request_id: str, tier: Tier, tokens: int) -> bytes:
        if len(request_id) != len(ID_SLOT):
            raise ValueError(f"request ids must be {len(ID_SLOT)} characters (uuid4().hex)")
        key = (tier, tokens if self.uses_length else 0)
        templates = self._templates.get(key)
        if templates is None:
            templates = [self._template(tier, max(key[1], 1)) for _ in range(self.variants)]
            self._templates[key] = templates
        self._next += 1
        # The envelope comes first in a frame: the first match is the id, never payload bytes.
        return templates[self._next % self.variants].replace(
            ID_SLOT.encode(), request_id.encode(), 1
        )

"""Shapes an engine must serve: TensorRT optimization profiles, warm-up and sample batches."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from infra.models.config import ModelConfig, TensorSpec
from schemas.tensors import DTYPES, Arrays

DEFAULT_SEQUENCE = 1
"""Size given to a dynamic non-batch dimension of a model without length buckets."""


@dataclass(frozen=True)
class Profile:
    """min/opt/max shape of one input for a TensorRT optimization profile."""

    min: tuple[int, ...]
    opt: tuple[int, ...]
    max: tuple[int, ...]


def _fill(spec: TensorSpec, batch: int, seq: int) -> tuple[int, ...]:
    """The spec's shape with the batch axis set to `batch` and other dynamic axes to `seq`."""
    return tuple(
        batch if axis == 0 else (seq if dim == -1 else dim) for axis, dim in enumerate(spec.shape)
    )


def sequence_bounds(config: ModelConfig) -> tuple[int, int, int]:
    """(min, opt, max) sequence length: 1, the smallest bucket, the largest bucket."""
    buckets = config.batching.length_buckets
    if buckets:
        return 1, buckets[0], buckets[-1]
    if config.tokenizer is not None:
        return 1, min(128, config.tokenizer.max_length), config.tokenizer.max_length
    return DEFAULT_SEQUENCE, DEFAULT_SEQUENCE, DEFAULT_SEQUENCE


def profiles(config: ModelConfig) -> dict[str, Profile]:
    """Per-input profile: `engine.profile_*` where given, else derived from batching and buckets.

    Derived: batch 1 / preferred-or-max / max_batch_size; dynamic axes 1 / first bucket / last.
    """
    engine, batching = config.engine, config.batching
    seq_min, seq_opt, seq_max = sequence_bounds(config)
    batch_opt = max(batching.preferred_batch_sizes, default=batching.max_batch_size)
    out: dict[str, Profile] = {}
    for spec in config.inputs:
        out[spec.name] = Profile(
            min=tuple(engine.profile_min.get(spec.name) or _fill(spec, 1, seq_min)),
            opt=tuple(engine.profile_opt.get(spec.name) or _fill(spec, batch_opt, seq_opt)),
            max=tuple(
                engine.profile_max.get(spec.name) or _fill(spec, batching.max_batch_size, seq_max)
            ),
        )
    return out


SAMPLE_ID_CAP = 1000
"""Sample ids are 1..999 (avoiding the usual pad id 0) unless a table has fewer rows."""


def sample_batch(
    config: ModelConfig,
    batch: int,
    seq: int | None = None,
    *,
    seed: int = 0,
    index_limits: Mapping[str, int] | None = None,
) -> Arrays:
    """Deterministic inputs of the declared dtypes: small ids, full masks, token type 0 (as
    the tokenizer gives), unit-normal floats.

    `index_limits`: {input: rows of the table the model reads it as}
    (`infra.models.lookups`); integer inputs stay below them (a BERT's token types index
    a table of 2: warm-up with ids up to 999 failed and the worker never started)."""
    rng = np.random.default_rng(seed)
    length = seq if seq is not None else sequence_bounds(config)[1]
    tokenizer = config.tokenizer
    mask_name = tokenizer.attention_mask if tokenizer else "attention_mask"
    type_name = tokenizer.token_type_ids if tokenizer else None
    limits = index_limits or {}
    arrays: Arrays = {}
    for spec in config.inputs:
        shape = _fill(spec, batch, length)
        dtype = DTYPES[spec.dtype]
        array: np.ndarray[Any, Any]
        if spec.name == mask_name:
            array = np.ones(shape, dtype=dtype)
        elif spec.name == type_name:
            array = np.zeros(shape, dtype=dtype)
        elif dtype.kind in "iu":
            high = min(SAMPLE_ID_CAP, limits.get(spec.name, SAMPLE_ID_CAP))
            array = rng.integers(1 if high > 1 else 0, high, size=shape).astype(dtype)
        elif dtype.kind == "b":
            array = rng.integers(0, 2, size=shape).astype(dtype)
        else:
            array = rng.standard_normal(shape).astype(dtype)
        arrays[spec.name] = array
    return arrays


def warmup_batches(
    config: ModelConfig, index_limits: Mapping[str, int] | None = None
) -> list[Arrays]:
    """One sample batch per (warm-up batch size, sequence length); every bucket when bucketed."""
    lengths: list[int | None] = list(
        config.warmup.sequence_lengths or config.batching.length_buckets
    ) or [None]
    sizes = [min(size, config.batching.max_batch_size) for size in config.warmup.batch_sizes]
    return [
        sample_batch(config, size, seq, index_limits=index_limits)
        for size in sizes
        for seq in lengths
    ]


def with_batch(shapes: Mapping[str, Profile], batch: int) -> dict[str, Profile]:
    """`shapes` with the batch axis of min, opt and max set to `batch`: the profile of a
    graph whose batch is fixed (`[1, 16]`), which takes no other."""

    def fixed(shape: tuple[int, ...]) -> tuple[int, ...]:
        return (batch, *shape[1:])

    return {name: Profile(fixed(p.min), fixed(p.opt), fixed(p.max)) for name, p in shapes.items()}

"""The cheap checks every engine makes on a batch: names, dtypes, ranks, one batch size;
and, at warm-up, that outputs come back with the batch first."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from infra.models.config import ModelConfig
from schemas.errors import EngineError, InvalidInput
from schemas.tensors import DTYPES, Arrays


def check_inputs(config: ModelConfig, inputs: Mapping[str, np.ndarray[Any, Any]]) -> Arrays:
    """The declared inputs as contiguous arrays, or InvalidInput naming what does not fit."""
    unknown = sorted(set(inputs) - {spec.name for spec in config.inputs})
    if unknown:
        raise InvalidInput(
            f"unknown input(s) {unknown} for model {config.name!r}", model=config.name
        )
    feed: Arrays = {}
    batch: int | None = None
    for spec in config.inputs:
        array = inputs.get(spec.name)
        if array is None:
            raise InvalidInput(f"missing input {spec.name!r}", model=config.name, input=spec.name)
        if array.dtype != DTYPES[spec.dtype]:
            raise InvalidInput(
                f"input {spec.name!r} must be {spec.dtype}, got {array.dtype}",
                model=config.name,
                input=spec.name,
            )
        if not spec.matches_shape(list(array.shape)):
            raise InvalidInput(
                f"input {spec.name!r} has shape {list(array.shape)}; the model takes {spec.shape}",
                model=config.name,
                input=spec.name,
            )
        if batch is None:
            batch = int(array.shape[0])
        elif array.shape[0] != batch:
            raise InvalidInput(
                f"inputs disagree on the batch size: {batch} vs {array.shape[0]} ({spec.name!r})",
                model=config.name,
            )
        feed[spec.name] = np.ascontiguousarray(array)
    if not batch:
        raise InvalidInput("empty batch", model=config.name)
    return feed


def check_outputs(config: ModelConfig, samples: int, outputs: Mapping[str, Any]) -> None:
    """Every declared output must come back with the batch first, one row a sample: the
    worker hands each request its own rows of axis 0. An output without a batch axis (a
    constant, a scalar, a transposed [16, N]) is refused at warm-up, naming it, instead of
    failing every request (or, at a batch of 16 for that [16, N], answering wrong rows)."""
    problems = [
        f"output {name!r} came back as {list(array.shape)} for a batch of {samples}"
        for name, array in outputs.items()
        if name in {spec.name for spec in config.outputs}
        and (array.ndim == 0 or array.shape[0] != samples)
    ]
    if problems:
        raise EngineError(
            f"model {config.name!r}: " + "; ".join(problems) + ": each output needs the batch "
            "as its first axis (leave an output without one out of model.yaml's outputs, "
            "or re-export the model with the batch first)",
            model=config.name,
        )


def fixed_batch(
    shapes: Mapping[str, Sequence[int | str | None]], *, model: str | None = None
) -> int | None:
    """The batch a graph's inputs fix (`[1, 16]`, not `[N, 16]`), or None when the batch
    axis is dynamic (-1, a name or None in a shape); EngineError (naming `model`) when
    inputs fix different batches."""
    fixed = {
        name: shape[0]
        for name, shape in shapes.items()
        if shape and isinstance(shape[0], int) and shape[0] > 0
    }
    if len(set(fixed.values())) > 1:
        context = {} if model is None else {"model": model}
        raise EngineError(f"graph inputs fix different batch sizes {fixed}", **context)
    return next(iter(fixed.values()), None)


def in_fixed_batches(
    feed: Arrays, size: int, run_once: Callable[[Arrays], Arrays], outputs: Sequence[str]
) -> Arrays:
    """`feed` run `size` samples at a time by a graph whose batch is fixed to `size`: a last
    short chunk is filled with copies of its last sample, whose rows are dropped again."""
    samples = len(next(iter(feed.values())))
    if samples == size:
        return run_once(feed)
    pieces: list[Arrays] = []
    for start in range(0, samples, size):
        chunk = {name: array[start : start + size] for name, array in feed.items()}
        short = size - min(size, samples - start)
        if short:
            chunk = {
                name: np.concatenate([array, np.repeat(array[-1:], short, axis=0)])
                for name, array in chunk.items()
            }
        out = run_once(chunk)
        pieces.append({name: value[: size - short] for name, value in out.items()})
    return {name: np.concatenate([piece[name] for piece in pieces]) for name in outputs}

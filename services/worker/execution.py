"""Run a batch: stack and pad inputs, call the engine, split outputs per request.

An engine failure is retried on halves, then per request, so one bad request ends as
its own `internal_error` while the rest of its batch is answered.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from infra.models.config import ModelConfig
from schemas.errors import EngineError
from schemas.tensors import Arrays
from services.worker.batching import padded_length

log = logging.getLogger(__name__)
InferFn = Callable[[Mapping[str, np.ndarray[Any, Any]]], Arrays]


@dataclass(frozen=True)
class RequestOutcome:
    """Outputs of one request, or the error that ended it, with per-stage times in ms."""

    outputs: Arrays | None
    error: str | None
    batch_size: int
    infer_ms: float
    assemble_ms: float
    split_ms: float


def sequence_inputs(config: ModelConfig) -> set[str]:
    """Inputs whose axis 1 is the sequence (padded together in a batch)."""
    if config.batching.sequence_input is None:
        return set()
    return {spec.name for spec in config.inputs if len(spec.shape) >= 2 and spec.shape[1] == -1}


def assemble(requests: Sequence[Arrays], config: ModelConfig, pad_length: int | None) -> Arrays:
    """One array per input: requests concatenated on axis 0, sequences padded on axis 1."""
    padded = sequence_inputs(config)
    pad_id = config.batching.pad_token_id
    seq_name = config.batching.sequence_input
    out: Arrays = {}
    for spec in config.inputs:
        parts = [request[spec.name] for request in requests]
        if spec.name in padded:
            target = max([pad_length or 0, *(part.shape[1] for part in parts)])
            fill = pad_id if spec.name == seq_name else 0
            parts = [
                part
                if part.shape[1] == target
                else np.pad(
                    part,
                    [(0, 0), (0, target - part.shape[1]), *[(0, 0)] * (part.ndim - 2)],
                    constant_values=fill,
                )
                for part in parts
            ]
        out[spec.name] = np.concatenate(parts, axis=0) if len(parts) > 1 else parts[0]
    return out


def split(outputs: Mapping[str, np.ndarray[Any, Any]], samples: Sequence[int]) -> list[Arrays]:
    """Cut each output's leading dimension back into per-request pieces."""
    bounds = np.cumsum([0, *samples])
    return [
        {name: array[bounds[i] : bounds[i + 1]] for name, array in outputs.items()}
        for i in range(len(samples))
    ]


def _check_rows(outputs: Mapping[str, np.ndarray[Any, Any]], samples: int) -> None:
    # split() would silently hand out short or empty slices: answered `ok`, but wrong.
    wrong = {
        name: list(array.shape)
        for name, array in outputs.items()
        if array.ndim == 0 or array.shape[0] != samples
    }
    if wrong:
        raise EngineError(f"engine returned outputs {wrong} for a batch of {samples} samples")


def _repad(requests: Sequence[Arrays], config: ModelConfig, pad_length: int | None) -> int | None:
    """The padding for part of a failed batch: its own bucket's, so a request too long for
    the model does not take its batch-mates' retries down with it."""
    name = config.batching.sequence_input
    if pad_length is None or name is None:
        return pad_length
    lengths = [r[name].shape[1] for r in requests if name in r and r[name].ndim >= 2]
    if not lengths:
        return pad_length
    return padded_length(max(lengths), tuple(config.batching.length_buckets))


def run_batch(
    infer: InferFn,
    requests: Sequence[Arrays],
    samples: Sequence[int],
    config: ModelConfig,
    pad_length: int | None,
) -> list[RequestOutcome]:
    """Run requests as one batch; on failure retry halves, then single requests."""
    started = time.perf_counter()
    assembled = started
    try:
        # Assembling is inside the retry: requests whose non-padded dynamic axes differ
        # cannot be concatenated, and that must not fail (and lose) the whole batch.
        batch = assemble(requests, config, pad_length)
        assembled = time.perf_counter()
        outputs = infer(batch)
        _check_rows(outputs, int(sum(samples)))
    except Exception as exc:  # engine failures are answered per request below, never lost
        if len(requests) == 1:
            log.warning("event=request_failed error=%r", exc)
            message = f"engine failed on this request: {type(exc).__name__}: {exc}"[:500]
            return [RequestOutcome(None, message, 1, 0.0, 0.0, 0.0)]
        log.warning("event=batch_failed size=%d retry=halves error=%r", len(requests), exc)
        middle = len(requests) // 2
        first, second = requests[:middle], requests[middle:]
        return [
            *run_batch(infer, first, samples[:middle], config, _repad(first, config, pad_length)),
            *run_batch(infer, second, samples[middle:], config, _repad(second, config, pad_length)),
        ]
    ran = time.perf_counter()
    pieces = split(outputs, samples)
    done = time.perf_counter()
    infer_ms = (ran - assembled) * 1000
    assemble_ms = (assembled - started) * 1000
    split_ms = (done - ran) * 1000
    return [
        RequestOutcome(piece, None, int(sum(samples)), infer_ms, assemble_ms, split_ms)
        for piece in pieces
    ]

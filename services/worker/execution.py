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


def sequence_outputs(config: ModelConfig) -> set[str]:
    """Outputs whose axis 1 is dynamic, in a model whose inputs are padded to a length: a
    token-level output (one row per token) comes back as long as the padded batch."""
    if config.batching.sequence_input is None:
        return set()
    return {spec.name for spec in config.outputs if len(spec.shape) >= 2 and spec.shape[1] == -1}


def split(
    outputs: Mapping[str, np.ndarray[Any, Any]],
    samples: Sequence[int],
    *,
    trimmed: Mapping[str, int] | None = None,
    lengths: Sequence[int | None] = (),
) -> list[Arrays]:
    """Cut each output's leading dimension back into per-request pieces.

    `trimmed`: {output: the batch's padded length}; such an output, as long on axis 1 as
    the padded batch, is cut back to each request's own length (`lengths[i]`): an answer
    must not depend on its batch-mates (a 5-token request batched with a 40-token one got
    40 rows of a token-level output, 35 of them for padding)."""
    bounds = np.cumsum([0, *samples])
    trims = trimmed or {}
    pieces: list[Arrays] = []
    for i in range(len(samples)):
        own = lengths[i] if i < len(lengths) else None
        piece: Arrays = {}
        for name, array in outputs.items():
            rows = array[bounds[i] : bounds[i + 1]]
            padded_to = trims.get(name)
            if padded_to is not None and own is not None and _padded(rows, padded_to, own):
                rows = rows[:, :own]
            piece[name] = rows
        pieces.append(piece)
    return pieces


def _padded(rows: np.ndarray[Any, Any], padded_to: int, own: int) -> bool:
    """The output follows the padded sequence on axis 1, past the request's own length."""
    return rows.ndim >= 2 and rows.shape[1] == padded_to > own


def _trimming(
    requests: Sequence[Arrays], batch: Arrays, config: ModelConfig
) -> tuple[dict[str, int], list[int | None]]:
    """`split`'s `trimmed` and `lengths` for this batch: its token-level outputs at the
    batch's padded length, each request's own length (nothing to trim without padding)."""
    name, outputs = config.batching.sequence_input, sequence_outputs(config)
    if name is None or not outputs or name not in batch or batch[name].ndim < 2:
        return {}, []
    padded_to = int(batch[name].shape[1])
    lengths = [int(r[name].shape[1]) if r[name].ndim >= 2 else None for r in requests]
    return dict.fromkeys(outputs, padded_to), lengths


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
    trimmed, lengths = _trimming(requests, batch, config)
    pieces = split(outputs, samples, trimmed=trimmed, lengths=lengths)
    done = time.perf_counter()
    infer_ms = (ran - assembled) * 1000
    assemble_ms = (assembled - started) * 1000
    split_ms = (done - ran) * 1000
    return [
        RequestOutcome(piece, None, int(sum(samples)), infer_ms, assemble_ms, split_ms)
        for piece in pieces
    ]

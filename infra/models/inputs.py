"""Check a request's inputs against the model's declared inputs and decode them."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from typing import Any, cast

import numpy as np

from infra.models.config import ModelConfig
from schemas.errors import InvalidInput
from schemas.request import InferenceRequest
from schemas.tensors import (
    DTYPES,
    Arrays,
    Buffer,
    Tensor,
    TensorDecodeError,
    TextInput,
    count_text,
    shape_text,
)


def _fail(message: str, **context: Any) -> InvalidInput:
    return InvalidInput(message, **context)


def _setting(named: Mapping[str, str], limit: str) -> str:
    setting = named.get(limit)
    return f" ({setting})" if setting else ""


def tensor_nbytes(tensor: Tensor) -> int:
    """Bytes the decoded tensor will take, from its declared dtype and shape."""
    return math.prod(tensor.shape) * DTYPES[tensor.dtype].itemsize


def validate_inputs(
    request: InferenceRequest,
    config: ModelConfig,
    *,
    max_tensor_bytes: int,
    max_samples: int,
    payload: Buffer | None = None,
    index_limits: Mapping[str, int] | None = None,
    limit_settings: Mapping[str, str] | None = None,
    check_indices: bool = True,
) -> tuple[Arrays, list[str] | None, int]:
    """Decode and check every input; returns (arrays, texts or None, samples).

    `payload`: a binary frame's bytes after the envelope, where `raw` tensors lie.
    `max_samples`: the caller's limit; the model's `max_batch_size` bounds it too (a request
    is never split across batches).
    `index_limits`: where the model is loaded (the worker), {input: rows of the table it
    indexes} from the tokenizer's vocabulary and the graph's lookups
    (`infra.models.lookups`): every value sent must be below it.
    `limit_settings`: the settings that set `max_tensor_bytes` and `max_samples`, named in
    the messages of requests over them ({"max_tensor_bytes": "INFERBUS_…", …}).
    `check_indices`: False leaves the value checks of token ids, masks and table rows of a
    request that passes every other check to the caller: `index_errors`, for many requests
    at once (the worker, per poll).
    Raises InvalidInput with a message naming the input and the rule it breaks.
    """
    named = limit_settings or {}
    texts: list[str] | None = None
    arrays: Arrays = {}
    text_inputs = {k: v for k, v in request.inputs.items() if isinstance(v, TextInput)}
    if text_inputs:
        texts = _text_samples(request, text_inputs, config)
        samples = len(texts)
        if payload is not None:
            _check_payload_covered((), len(payload))
    else:  # every input is a tensor (the common case: no second dict per request)
        tensor_inputs = cast(dict[str, Tensor], request.inputs)
        arrays, samples = _decoded_tensors(
            tensor_inputs, config, payload=payload, max_tensor_bytes=max_tensor_bytes, named=named
        )
    too_many = _too_many_samples(samples, config, max_samples, named)
    # Values before sizes, as always; deferred (`check_indices` False) only while the
    # request is otherwise good, so a request that breaks both hears of its values first.
    if texts is None and (check_indices or too_many is not None):
        _check_indices(arrays, config, index_limits or {})
    if too_many is not None:
        raise too_many
    return arrays, texts, samples


def _too_many_samples(
    samples: int, config: ModelConfig, max_samples: int, named: Mapping[str, str]
) -> InvalidInput | None:
    """The error of a request over the model's batch size or the caller's limit, or None."""
    batch_cap = config.batching.max_batch_size
    if samples > batch_cap and batch_cap <= max_samples:
        return _fail(
            f"request holds {samples} samples; model {config.name!r} runs at most "
            f"{batch_cap} in a batch (batching.max_batch_size)"
        )
    if samples > max_samples:
        return _fail(
            f"request holds {samples} samples; the limit is {max_samples}"
            + _setting(named, "max_samples")
        )
    return None


def _text_samples(
    request: InferenceRequest, text_inputs: dict[str, TextInput], config: ModelConfig
) -> list[str]:
    """The strings of a request's one text input, or InvalidInput."""
    if config.tokenizer is None:
        raise _fail(
            f"model {config.name!r} has no tokenizer; send tensors "
            f"{[s.name for s in config.inputs]} instead of text",
            inputs=",".join(text_inputs),
        )
    if len(text_inputs) > 1 or len(request.inputs) > len(text_inputs):
        raise _fail("send one text input, or tensors, not both", inputs=",".join(request.inputs))
    texts = next(iter(text_inputs.values())).texts()
    if not texts:
        raise _fail("text input holds no strings (empty batch)")
    if any(not isinstance(t, str) or not t for t in texts):
        raise _fail("every text sample must be a non-empty string")
    return texts


def _decoded_tensors(
    tensor_inputs: dict[str, Tensor],
    config: ModelConfig,
    *,
    payload: Buffer | None,
    max_tensor_bytes: int,
    named: Mapping[str, str],
) -> tuple[Arrays, int]:
    """Every declared input's array, checked against its spec, and the samples they hold."""
    specs = config.inputs
    if len(tensor_inputs) != len(specs) or any(s.name not in tensor_inputs for s in specs):
        _check_names(tensor_inputs, config)
    arrays: Arrays = {}
    samples: int | None = None
    for spec in specs:
        tensor = tensor_inputs[spec.name]
        if tensor.dtype != spec.dtype:
            raise _fail(
                f"input {spec.name!r} must be {spec.dtype}, got {tensor.dtype}",
                input=spec.name,
            )
        if not spec.matches_shape(tensor.shape):
            raise _fail(
                f"input {spec.name!r} has shape {shape_text(tensor.shape)}; the model takes "
                f"{spec.shape} (-1 = any)",
                input=spec.name,
            )
        if tensor.shape[0] < 1:
            raise _fail(f"input {spec.name!r} has an empty batch dimension", input=spec.name)
        nbytes = tensor_nbytes(tensor)
        if nbytes > max_tensor_bytes:
            raise _fail(
                f"input {spec.name!r} is {count_text(nbytes)} bytes; "
                f"the limit is {max_tensor_bytes}" + _setting(named, "max_tensor_bytes"),
                input=spec.name,
            )
        try:
            array = tensor.to_numpy(payload)
        except TensorDecodeError as exc:
            raise _fail(f"input {spec.name!r}: {exc}", input=spec.name) from exc
        if array.dtype.kind == "f" and not spec.allow_nan and not np.isfinite(array).all():
            raise _fail(
                f"input {spec.name!r} holds NaN or infinity (or a value beyond {spec.dtype}'s "
                "range)",
                input=spec.name,
            )
        if samples is None:
            samples = int(array.shape[0])
        elif array.shape[0] != samples:
            raise _fail(
                f"inputs disagree on the batch dimension ({samples} vs {array.shape[0]})",
                input=spec.name,
            )
        arrays[spec.name] = array
    assert samples is not None
    if payload is not None:
        _check_payload_covered(tensor_inputs.values(), len(payload))
    return arrays, samples


def _check_payload_covered(tensors: Iterable[Tensor], payload_bytes: int) -> None:
    """Every byte of a frame's payload belongs to a `raw` tensor: a stray byte before a
    tensor (a framer that counted the envelope one byte short) would shift what is read,
    and the request would be answered `ok` on the wrong numbers."""
    covered, gap_end = 0, payload_bytes
    for offset, nbytes in sorted((t.raw.offset, t.raw.nbytes) for t in tensors if t.raw):
        if offset > covered:
            gap_end = offset
            break
        covered = max(covered, offset + nbytes)
    if covered >= payload_bytes:
        return
    raise _fail(
        f"the frame's payload holds {payload_bytes} bytes and bytes {covered}-{gap_end - 1} are "
        "in no tensor's `raw` slice: a payload holds exactly the tensors' bytes, each at the "
        "offset its entry names, counted from the first byte after the envelope (is the "
        "envelope's length at bytes 4-7 right?)"
    )


def index_errors(
    requests: Sequence[Arrays], config: ModelConfig, limits: Mapping[str, int]
) -> list[InvalidInput | None]:
    """For many requests' tensors (`validate_inputs(..., check_indices=False)`), the error
    each earns for its token ids, masks or table rows, or None: what `validate_inputs` says
    of it alone, for a poll of them at once.

    Each value range is one reduction over all the requests' values: per request it took
    two reductions an input, and at a few dozen tokens numpy's cost a call, not the values,
    is the price. Only when a check fails is each request checked alone, so each gets its
    own message.
    """
    if not requests:
        return []
    if _all_fit(requests, config, limits):
        return [None] * len(requests)
    errors: list[InvalidInput | None] = []
    for arrays in requests:
        try:
            _check_indices(arrays, config, limits)
        except InvalidInput as exc:
            errors.append(exc)
        else:
            errors.append(None)
    return errors


def _all_fit(requests: Sequence[Arrays], config: ModelConfig, limits: Mapping[str, int]) -> bool:
    """True only when `_check_indices` passes every request: its shape rules one request at
    a time, its value ranges over all values at once. False: check them one by one (also
    for whatever is unusual, e.g. a mask of floats, which the rules skip)."""
    ranges: dict[str, tuple[int, int | None]] = {}  # input: [low, high), None: no high
    tokenizer = config.tokenizer
    if tokenizer is not None:
        companions = [c for c in (tokenizer.attention_mask, tokenizer.token_type_ids) if c]
        for arrays in requests:
            ids = arrays.get(tokenizer.input_ids)
            if ids is None or ids.ndim < 2 or ids.size == 0 or ids.dtype.kind not in "iu":
                return False
            if ids.shape[1] > tokenizer.max_length:
                return False
            for companion in companions:
                values = arrays.get(companion)
                if values is not None and (
                    values.shape != ids.shape or values.dtype.kind not in "iu"
                ):
                    return False
        _narrow(ranges, tokenizer.input_ids, 0, limits.get(tokenizer.input_ids))
        if tokenizer.attention_mask:
            _narrow(ranges, tokenizer.attention_mask, 0, 2)
        if tokenizer.token_type_ids:
            _narrow(ranges, tokenizer.token_type_ids, 0, None)
    for name, rows in limits.items():
        _narrow(ranges, name, -rows, rows)
    for name, (low, high) in ranges.items():
        parts = [arrays[name] for arrays in requests if name in arrays]
        if not parts:
            continue
        values = np.concatenate(parts, axis=None)
        if values.dtype.kind not in "iu":
            return False
        if low == 0:
            if not _all_below(values, high):
                return False
            mask = tokenizer.attention_mask if tokenizer is not None else None
            if name == mask and not _every_sample_reads_a_token(parts, values):
                return False
        elif values.size and (
            int(values.min()) < low or (high is not None and int(values.max()) >= high)
        ):
            return False
    return True


def _narrow(
    ranges: dict[str, tuple[int, int | None]], name: str, low: int, high: int | None
) -> None:
    """Add the rule [low, high) for `name`: where an input has several (a token-type input
    that is also a table, one input named as two), its values must keep all of them."""
    if name in ranges:
        known_low, known_high = ranges[name]
        low = max(low, known_low)
        high = known_high if high is None else high if known_high is None else min(high, known_high)
    ranges[name] = (low, high)


def _check_names(tensor_inputs: dict[str, Tensor], config: ModelConfig) -> None:
    """Raise InvalidInput naming the inputs that are unknown to the model or missing."""
    declared = {spec.name for spec in config.inputs}
    unknown = sorted(set(tensor_inputs) - declared)
    if unknown:
        raise _fail(
            f"unknown input(s) {_first(unknown)}; model {config.name!r} takes {sorted(declared)}",
            model=config.name,
        )
    missing = sorted(declared - set(tensor_inputs))
    if missing:
        raise _fail(f"missing input(s) {missing} for model {config.name!r}", model=config.name)


def _first(names: list[str], shown: int = 5) -> str:
    """The first `shown` names as a list, and how many more there are."""
    more = len(names) - shown
    return f"{names[:shown]}" + (f" (+{more} more)" if more > 0 else "")


def _check_indices(arrays: Arrays, config: ModelConfig, limits: Mapping[str, int]) -> None:
    """Raise InvalidInput for token ids, masks or table rows that the model cannot read."""
    if config.tokenizer is not None:
        _check_token_ids(arrays, config, limits)
    if limits:
        _check_lookups(arrays, config, limits)


def _check_token_ids(arrays: Arrays, config: ModelConfig, limits: Mapping[str, int]) -> None:
    """Token ids sent as tensors obey what the tokenizer would give: at most `max_length`
    of them, none negative (ONNX's Gather reads -5 as the fifth id from the end: a wrong
    answer, not an error) and each within the vocabulary; the attention mask and token
    types, where sent, of the ids' shape (a shorter mask was answered `ok`, a longer one
    failed in the engine), the mask of 0s and 1s and no token type negative. A sample of
    no tokens (no ids, or a mask of 0s) is refused as blank text is: the model would pool
    nothing and answer zeros."""
    tokenizer = config.tokenizer
    assert tokenizer is not None
    name = tokenizer.input_ids
    ids = arrays.get(name)
    if ids is None or ids.ndim < 2 or ids.dtype.kind not in "iu":
        return
    if ids.size == 0:
        raise _fail(
            f"input {name!r} holds no tokens (shape {list(ids.shape)}); each sample needs "
            "at least one",
            input=name,
        )
    for companion in filter(None, (tokenizer.attention_mask, tokenizer.token_type_ids)):
        values = arrays.get(companion)
        if values is None:
            continue
        if values.shape != ids.shape:
            raise _fail(
                f"input {companion!r} has shape {list(values.shape)}; it must match "
                f"{name!r}'s {list(ids.shape)}",
                input=companion,
            )
        if values.dtype.kind not in "iu":
            continue
        is_mask = companion == tokenizer.attention_mask
        if not _all_below(values, 2 if is_mask else None):
            lowest, highest = int(values.min()), int(values.max())
            if is_mask and (lowest < 0 or highest > 1):
                raise _fail(f"input {companion!r} may hold only 0 and 1", input=companion)
            raise _fail(
                f"input {companion!r} holds {lowest}; it is never negative", input=companion
            )
        if is_mask:
            _check_mask_reads_a_token(values, companion)
    if ids.shape[1] > tokenizer.max_length:
        raise _fail(
            f"input {name!r} holds {ids.shape[1]} tokens; model {config.name!r} takes at "
            f"most {tokenizer.max_length} (its tokenizer's max_length)",
            input=name,
        )
    vocab_size = limits.get(name)
    if _all_below(ids, vocab_size):
        return
    low, high = int(ids.min()), int(ids.max())
    if low < 0:
        raise _fail(f"input {name!r} holds token id {low}; ids are never negative", input=name)
    if vocab_size is not None and high >= vocab_size:
        raise _fail(
            f"input {name!r} holds token id {high}; model {config.name!r} has a vocabulary "
            f"of {vocab_size} (ids 0-{vocab_size - 1})",
            input=name,
        )


def _check_mask_reads_a_token(mask: np.ndarray[Any, Any], name: str) -> None:
    """Raise InvalidInput for a sample whose attention mask is all 0s (values 0 and 1)."""
    read = mask.reshape(mask.shape[0], -1).any(axis=1)
    if not read.all():
        sample = int(np.argmin(read))
        raise _fail(
            f"input {name!r} is all 0s in sample {sample}: no token to read; each sample "
            "needs at least one 1",
            input=name,
        )


def _every_sample_reads_a_token(masks: Sequence[np.ndarray[Any, Any]], values: Any) -> bool:
    """Whether each sample of `masks` (0s and 1s, none empty; `values` all of them
    concatenated, flat) holds a 1: one reduction over the poll, not one a request."""
    lengths = np.repeat([m.size // m.shape[0] for m in masks], [m.shape[0] for m in masks])
    starts = np.zeros(len(lengths), dtype=np.intp)
    np.cumsum(lengths[:-1], out=starts[1:])
    return bool(np.maximum.reduceat(values, starts).min() >= 1)


def _all_below(values: np.ndarray[Any, Any], bound: int | None) -> bool:
    """Whether every integer in `values` lies in [0, bound) (`None`: is not negative).

    One reduction instead of min and max (each costs a request about a microsecond): read
    as unsigned, a negative number is at least 2**(bits - 1), above every bound that fits
    the type. Only the checks' passing path uses it; a failure is described from min and max.
    """
    dtype = values.dtype
    if dtype.kind == "i":
        limit = 1 << (8 * dtype.itemsize - 1)
        bound = limit if bound is None else min(bound, limit)
        values = values.view(_unsigned(dtype))
    elif bound is None:
        return True
    return values.size == 0 or int(np.maximum.reduce(values, axis=None)) < bound


@cache
def _unsigned(signed: np.dtype[Any]) -> np.dtype[Any]:
    """The unsigned integer type of the same width and byte order."""
    return np.dtype(signed.str.replace("i", "u"))


def _check_lookups(arrays: Arrays, config: ModelConfig, limits: Mapping[str, int]) -> None:
    """Integer inputs the model reads as table rows stay within the table, as ONNX's
    `Gather` counts (-rows to rows - 1): past it, the whole batch would fail in the engine.
    The tokenizer's ids were checked (and named a vocabulary) already."""
    token_ids = config.tokenizer.input_ids if config.tokenizer is not None else None
    for name, rows in limits.items():
        values = arrays.get(name)
        if name == token_ids or values is None or values.size == 0 or values.dtype.kind not in "iu":
            continue
        low, high = int(values.min()), int(values.max())
        worst = high if high >= rows else low
        if high >= rows or low < -rows:
            raise _fail(
                f"input {name!r} holds {worst}; model {config.name!r} reads it as a row of a "
                f"table of {rows} (0-{rows - 1})",
                input=name,
            )

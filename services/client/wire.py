"""Requests in their wire form: inputs as tensors or text, an envelope, a frame's payload."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import ValidationError

from schemas import headers as h
from schemas.errors import describe_validation_error
from schemas.frames import CONTENT_TYPE as FRAME_CONTENT_TYPE
from schemas.frames import join_frame
from schemas.request import InferenceRequest
from schemas.tensors import DTYPES, RawSlice, Tensor, TensorDecodeError, TextInput, dtype_name

InputValue = np.ndarray[Any, Any] | Tensor | TextInput | str | list[str] | list[Any]
"""An array, a tensor, text (a string or a list of strings), or nested lists of numbers."""


def _is_text(value: InputValue) -> bool:
    # An empty list is not text: it was sent as text to a model without a tokenizer.
    return isinstance(value, str) or (
        isinstance(value, list) and bool(value) and all(isinstance(item, str) for item in value)
    )


def _wire_form(
    inputs: Mapping[str, InputValue], tensor: Callable[[np.ndarray[Any, Any]], Tensor]
) -> dict[str, Tensor | TextInput]:
    """Tensors and text inputs kept, strings as text inputs, arrays through `tensor`."""
    out: dict[str, Tensor | TextInput] = {}
    for name, value in inputs.items():
        if isinstance(value, Tensor | TextInput):
            out[name] = value
        elif _is_text(value):
            out[name] = TextInput(text=value)
        else:
            try:
                out[name] = tensor(np.asarray(value))
            except ValidationError as exc:  # named: which input, what is wrong
                raise ValueError(f"input {name!r}: {describe_validation_error(exc)}") from None
            except (TensorDecodeError, ValueError) as exc:
                raise ValueError(f"input {name!r}: {exc}") from exc
    return out


def to_wire_inputs(inputs: Mapping[str, InputValue]) -> dict[str, Tensor | TextInput]:
    """Numpy arrays become tensors (base64), strings become text inputs: the JSON form."""
    return _wire_form(inputs, lambda array: Tensor.from_numpy(array, encoding="b64"))


def to_frame_inputs(
    inputs: Mapping[str, InputValue],
) -> tuple[dict[str, Tensor | TextInput], list[bytes]]:
    """Numpy arrays become `raw` tensors and the frame payload that holds their bytes."""
    payload: list[bytes] = []
    offset = 0

    def raw_tensor(array: np.ndarray[Any, Any]) -> Tensor:
        nonlocal offset
        wire = dtype_name(array.dtype)
        raw = np.ascontiguousarray(array, dtype=DTYPES[wire]).tobytes()
        tensor = Tensor(
            dtype=wire, shape=list(array.shape), raw=RawSlice(offset=offset, nbytes=len(raw))
        )
        payload.append(raw)
        offset += len(raw)
        return tensor

    return _wire_form(inputs, raw_tensor), payload


@dataclass(frozen=True)
class WireRequest:
    """A request ready to produce: its envelope and, for a binary frame, the payload."""

    envelope: InferenceRequest
    payload: tuple[bytes, ...] | None = None
    """None: a JSON event; else the bytes the envelope's `raw` tensors point into."""

    @property
    def request_id(self) -> str:
        return self.envelope.request_id

    def encode(self) -> tuple[bytes, bytes]:
        """(value, content type) as produced to `inferbus.ingest`."""
        document = self.envelope.model_dump_json(exclude_none=True).encode()
        if self.payload is None:
            return document, h.JSON
        return join_frame(document, self.payload), FRAME_CONTENT_TYPE

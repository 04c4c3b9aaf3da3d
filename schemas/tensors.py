"""Named tensors on the wire: dtype and shape, data as a nested list, base64, or raw frame bytes."""

from __future__ import annotations

import base64
import binascii
import math
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

DType = Literal["float32", "float16", "float64", "int64", "int32", "int16", "int8", "uint8", "bool"]
DTYPES: dict[str, np.dtype[Any]] = {
    "float32": np.dtype("<f4"),
    "float16": np.dtype("<f2"),
    "float64": np.dtype("<f8"),
    "int64": np.dtype("<i8"),
    "int32": np.dtype("<i4"),
    "int16": np.dtype("<i2"),
    "int8": np.dtype("i1"),
    "uint8": np.dtype("u1"),
    "bool": np.dtype("?"),
}
Buffer = bytes | bytearray | memoryview
Arrays = dict[str, np.ndarray[Any, Any]]
"""Named arrays: a request's inputs, a batch, an engine's outputs."""


def count_text(n: int) -> str:
    """A whole number as a message quotes it; one of more than 18 digits by its length (a
    request's shape may declare any size, and a product of them more)."""
    text = str(n)
    return text if len(text) <= 18 else f"<a {len(text)}-digit number>"


def shape_text(shape: list[int], shown: int = 8) -> str:
    """A declared shape as a message quotes it: its first `shown` dimensions (`count_text`)."""
    head = ", ".join(count_text(d) for d in shape[:shown])
    return f"[{head}, …] (rank {len(shape)})" if len(shape) > shown else f"[{head}]"


class TensorDecodeError(ValueError):
    """The tensor's data does not match its declared dtype and shape."""


class RawSlice(BaseModel):
    """Where a tensor's raw little-endian bytes lie in a binary frame's payload."""

    model_config = ConfigDict(frozen=True)

    offset: int = Field(
        ge=0, strict=True, description="Start within the payload (after the envelope)."
    )
    nbytes: int = Field(
        ge=0, strict=True, description="Length in bytes: product(shape) x itemsize."
    )


class Tensor(BaseModel):
    """A tensor with a leading batch dimension: exactly one of `data`, `b64` or `raw`."""

    model_config = ConfigDict(
        frozen=True,
        # What `_one_payload` checks, for producers that validate against the JSON Schema:
        # exactly one of the three forms is given and not null.
        json_schema_extra={
            "oneOf": [
                {"required": ["data"], "properties": {"data": {"not": {"type": "null"}}}},
                {"required": ["b64"], "properties": {"b64": {"type": "string"}}},
                {"required": ["raw"], "properties": {"raw": {"type": "object"}}},
            ]
        },
    )

    dtype: DType
    shape: list[Annotated[int, Field(strict=True, json_schema_extra={"minimum": 0})]] = Field(
        min_length=1, fail_fast=True, description="Leading dimension is the batch."
    )
    data: Any = Field(default=None, description="Nested list matching `shape`.")
    b64: str | None = Field(default=None, description="Raw little-endian bytes, base64.")
    raw: RawSlice | None = Field(
        default=None, description="Raw little-endian bytes in a binary frame's payload."
    )

    @model_validator(mode="after")
    def _one_payload(self) -> Tensor:
        given = (self.data is not None) + (self.b64 is not None) + (self.raw is not None)
        if given != 1:
            raise ValueError("a tensor carries exactly one of `data` (nested list), `b64` or `raw`")
        if min(self.shape) < 0:  # shape has at least one dimension
            raise ValueError(f"shape {shape_text(self.shape)} has a negative dimension")
        return self

    def to_numpy(self, payload: Buffer | None = None) -> np.ndarray[Any, Any]:
        """Decode to an array of the declared dtype and shape, or raise TensorDecodeError.

        `payload`: a binary frame's bytes after the envelope, for `raw` tensors. (A request's
        tensors carry no payload of their own: a private attribute cost every request ~1.4 µs
        a tensor in pydantic; a result's outputs do, `schemas.result.OutputTensor`.)
        """
        return decode_tensor(
            self.dtype,
            self.shape,
            data=self.data,
            b64=self.b64,
            raw=(self.raw.offset, self.raw.nbytes) if self.raw is not None else None,
            payload=payload,
        )

    @classmethod
    def from_numpy(cls, array: np.ndarray[Any, Any], *, encoding: str = "list") -> Tensor:
        """Encode an array; `encoding` is `list` (readable) or `b64` (compact)."""
        name = dtype_name(array.dtype)
        if encoding == "b64":
            raw = np.ascontiguousarray(array, dtype=DTYPES[name]).tobytes()
            return cls(dtype=name, shape=list(array.shape), b64=base64.b64encode(raw).decode())
        return cls(dtype=name, shape=list(array.shape), data=array.tolist())


def decode_tensor(
    dtype_name: str,
    shape: list[int],
    *,
    data: Any = None,
    b64: str | None = None,
    raw: tuple[int, int] | None = None,
    payload: Buffer | None = None,
) -> np.ndarray[Any, Any]:
    """One tensor's array from whichever form it came in; TensorDecodeError names the problem.

    b64 and raw arrays are read-only views of their bytes (no copy).
    """
    dtype = DTYPES[dtype_name]
    expected = math.prod(shape)
    if raw is not None:
        offset, nbytes = raw
        if payload is None:
            raise TensorDecodeError("`raw` needs a binary frame: the event has no payload")
        if offset + nbytes > len(payload):
            raise TensorDecodeError(
                f"`raw` reaches byte {offset + nbytes}; the frame's payload has {len(payload)}"
            )
        if nbytes != expected * dtype.itemsize:
            raise TensorDecodeError(
                f"`raw` holds {nbytes} bytes; shape {shape_text(shape)} of {dtype_name} "
                f"needs {count_text(expected * dtype.itemsize)}"
            )
        # One call for view and shape: a third of frombuffer-then-reshape's cost, per tensor.
        return np.ndarray(shape, dtype, payload, offset)
    if b64 is not None:
        try:
            decoded = base64.b64decode(b64, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise TensorDecodeError(
                f"`b64` is not valid base64: {exc} (RFC 4648 section 4: the standard alphabet "
                "A-Z a-z 0-9 + /, padded with = to a multiple of 4 characters, no line breaks)"
            ) from exc
        if len(decoded) != expected * dtype.itemsize:
            raise TensorDecodeError(
                f"`b64` holds {len(decoded)} bytes; shape {shape_text(shape)} of {dtype_name} "
                f"needs {count_text(expected * dtype.itemsize)}"
            )
        return np.frombuffer(decoded, dtype=dtype).reshape(shape)
    array = _from_nested_list(data, dtype, dtype_name)
    if array.size == 0 and expected == 0:
        # `[]` is how a nested list spells any empty tensor, e.g. shape [0, 16].
        array = array.reshape(shape)
    if list(array.shape) != list(shape):
        raise TensorDecodeError(
            f"`data` has shape {list(array.shape)} but the tensor declares {shape_text(shape)}"
        )
    return array


def _from_nested_list(data: Any, dtype: np.dtype[Any], dtype_name: str) -> np.ndarray[Any, Any]:
    """A nested list's array of `dtype`, refusing what a cast would change silently: strings
    (NumPy parses "1.5"), fractions for an integer or bool dtype (1.5 became 1), and numbers
    beyond an integer dtype's range (NumPy's conversion from the list itself is exact and
    raises there; a float64 view of the list would round 2**63 - 1 up and wrap it)."""
    try:
        loose = np.asarray(data)
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:
        raise TensorDecodeError(f"`data` is not a {dtype_name} nested list: {exc}") from exc
    kind = loose.dtype.kind
    if kind in "US":
        raise TensorDecodeError(f"`data` holds strings; the tensor is {dtype_name}")
    if kind == "b" and dtype.kind != "b":  # NumPy reads true as 1, false as 0
        raise TensorDecodeError(_booleans(dtype_name))
    if dtype.kind == "f":
        if kind not in "ifO":
            raise TensorDecodeError(f"`data` holds values that are not numbers ({dtype_name})")
        if kind == "O" and _holds_bool(loose):  # with null beside them, still objects
            raise TensorDecodeError(_booleans(dtype_name))
        try:  # JSON null (None) becomes NaN, refused unless the input allows NaN
            with np.errstate(over="ignore"):  # beyond the dtype: inf, refused by the input check
                return loose.astype(dtype, copy=False)
        except (ValueError, TypeError, OverflowError) as exc:
            raise TensorDecodeError(f"`data` holds values that are not numbers: {exc}") from exc
    if kind not in "biuf":  # null (None), or a whole number beyond every NumPy integer
        if dtype.kind == "b":  # NumPy reads None as False
            raise TensorDecodeError("`data` holds values other than 0 and 1; the tensor is bool")
        return _exact(data, dtype, dtype_name)
    if kind == "f":
        fractional = loose[loose != np.trunc(loose)]
        if fractional.size:
            raise TensorDecodeError(
                f"`data` holds {fractional.flat[0].item()!r}; the tensor is {dtype_name}, "
                "which holds whole numbers"
            )
    if dtype.kind == "b" and kind != "b" and ((loose != 0) & (loose != 1)).any():
        raise TensorDecodeError("`data` holds values other than 0 and 1; the tensor is bool")
    if kind == "f" or dtype.kind != "b":
        return _exact(data, dtype, dtype_name)
    return loose.astype(dtype, copy=False)


def _booleans(dtype_name: str) -> str:
    return f"`data` holds true or false; the tensor is {dtype_name}, which holds numbers"


def _holds_bool(objects: np.ndarray[Any, Any]) -> bool:
    """Whether an object array (a list with nulls) holds a JSON true or false: its types
    are read in C, and only lists that NumPy could not make numbers of come here."""
    return bool in set(map(type, objects.ravel().tolist()))


def _exact(data: Any, dtype: np.dtype[Any], dtype_name: str) -> np.ndarray[Any, Any]:
    """The list converted by NumPy straight to an integer or bool dtype: exact, and raising
    for a number beyond the dtype."""
    try:
        return np.asarray(data, dtype=dtype)
    except OverflowError:
        if dtype.kind == "b":
            raise TensorDecodeError(f"`data` holds numbers too large for {dtype_name}") from None
        info = np.iinfo(dtype)
        raise TensorDecodeError(
            f"`data` holds a number beyond {dtype_name}'s range ({info.min} to {info.max})"
        ) from None
    except (ValueError, TypeError):
        raise TensorDecodeError(
            f"`data` holds null or values that are not numbers; the tensor is {dtype_name}"
        ) from None


class TextInput(BaseModel):
    """Raw text for a model with a tokenizer; tokenized in the worker."""

    model_config = ConfigDict(frozen=True)

    text: str | Annotated[list[str], Field(fail_fast=True)] = Field(
        description="One string per sample, or one string."
    )

    def texts(self) -> list[str]:
        return [self.text] if isinstance(self.text, str) else list(self.text)


def dtype_name(dtype: np.dtype[Any]) -> DType:
    """The wire name of a numpy dtype, or TensorDecodeError for one we do not carry."""
    for name, candidate in DTYPES.items():
        if np.dtype(dtype) == candidate or np.dtype(dtype).newbyteorder("<") == candidate:
            return name  # type: ignore[return-value]
    raise TensorDecodeError(f"dtype {dtype} is not carried on the wire")

"""Named tensors on the wire: dtype, shape and data as a nested list or base64 bytes."""

from __future__ import annotations

import base64
import binascii
import math
from typing import Any, Literal

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


class TensorDecodeError(ValueError):
    """The tensor's data does not match its declared dtype and shape."""


class Tensor(BaseModel):
    """A tensor with a leading batch dimension; `data` (nested list) or `b64` (raw LE bytes)."""

    model_config = ConfigDict(frozen=True)

    dtype: DType
    shape: list[int] = Field(min_length=1, description="Leading dimension is the batch.")
    data: Any = Field(default=None, description="Nested list matching `shape`.")
    b64: str | None = Field(default=None, description="Raw little-endian bytes, base64.")

    @model_validator(mode="after")
    def _one_payload(self) -> Tensor:
        if (self.data is None) == (self.b64 is None):
            raise ValueError("a tensor carries exactly one of `data` (nested list) or `b64`")
        if any(d < 0 for d in self.shape):
            raise ValueError(f"shape {self.shape} has a negative dimension")
        return self

    def to_numpy(self) -> np.ndarray[Any, Any]:
        """Decode to an array of the declared dtype and shape, or raise TensorDecodeError."""
        dtype = DTYPES[self.dtype]
        expected = math.prod(self.shape)
        if self.b64 is not None:
            try:
                raw = base64.b64decode(self.b64, validate=True)
            except (binascii.Error, ValueError) as exc:
                raise TensorDecodeError(f"`b64` is not valid base64: {exc}") from exc
            if len(raw) != expected * dtype.itemsize:
                raise TensorDecodeError(
                    f"`b64` holds {len(raw)} bytes; shape {self.shape} of {self.dtype} "
                    f"needs {expected * dtype.itemsize}"
                )
            return np.frombuffer(raw, dtype=dtype).reshape(self.shape)
        try:
            array = np.asarray(self.data, dtype=dtype)
        except (ValueError, TypeError, OverflowError) as exc:
            raise TensorDecodeError(f"`data` is not a {self.dtype} nested list: {exc}") from exc
        if array.size == 0 and expected == 0:
            # `[]` is how a nested list spells any empty tensor, e.g. shape [0, 16].
            array = array.reshape(self.shape)
        if list(array.shape) != list(self.shape):
            raise TensorDecodeError(
                f"`data` has shape {list(array.shape)} but the tensor declares {self.shape}"
            )
        return array

    @classmethod
    def from_numpy(cls, array: np.ndarray[Any, Any], *, encoding: str = "list") -> Tensor:
        """Encode an array; `encoding` is `list` (readable) or `b64` (compact)."""
        name = dtype_name(array.dtype)
        if encoding == "b64":
            raw = np.ascontiguousarray(array, dtype=DTYPES[name]).tobytes()
            return cls(dtype=name, shape=list(array.shape), b64=base64.b64encode(raw).decode())
        return cls(dtype=name, shape=list(array.shape), data=array.tolist())


class TextInput(BaseModel):
    """Raw text for a model with a tokenizer; tokenized in the worker."""

    model_config = ConfigDict(frozen=True)

    text: str | list[str] = Field(description="One string per sample, or one string.")

    def texts(self) -> list[str]:
        return [self.text] if isinstance(self.text, str) else list(self.text)


def dtype_name(dtype: np.dtype[Any]) -> DType:
    """The wire name of a numpy dtype, or TensorDecodeError for one we do not carry."""
    for name, candidate in DTYPES.items():
        if np.dtype(dtype) == candidate or np.dtype(dtype).newbyteorder("<") == candidate:
            return name  # type: ignore[return-value]
    raise TensorDecodeError(f"dtype {dtype} is not carried on the wire")

"""The terminal result of one request, as published on its reply topic."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from schemas.frames import is_frame, split_frame
from schemas.tensors import Buffer, Tensor

Status = Literal[
    "ok",
    "invalid_input",
    "model_not_found",
    "unauthorized",
    "deadline_exceeded",
    "rejected_overload",
    "internal_error",
]
STATUSES: tuple[Status, ...] = (
    "ok",
    "invalid_input",
    "model_not_found",
    "unauthorized",
    "deadline_exceeded",
    "rejected_overload",
    "internal_error",
)


class ErrorInfo(BaseModel):
    """Why a request did not succeed, in words a person can act on."""

    model_config = ConfigDict(frozen=True)

    code: Status
    message: str


class Timings(BaseModel):
    """Stage durations of one request, in milliseconds; a stage it never reached is null."""

    model_config = ConfigDict(frozen=True)

    ingest_ms: float | None = None
    queue_ms: float | None = None
    batch_wait_ms: float | None = None
    preprocess_ms: float | None = None
    infer_ms: float | None = None
    postprocess_ms: float | None = None
    publish_ms: float | None = None
    e2e_ms: float | None = None


class OutputTensor(Tensor):
    """A result's output tensor, with a leading batch dimension: exactly one of `data`,
    `b64` or `raw` (raw bytes in the result's binary frame)."""

    # A separate class from the request's `Tensor`: one parsed from a binary frame keeps the
    # frame's payload so that `to_numpy()` reads its `raw` bytes unaided, and a private
    # attribute costs pydantic ~1.4 µs a tensor, which requests do not pay.
    _payload: bytes | memoryview | None = PrivateAttr(default=None)

    def to_numpy(self, payload: Buffer | None = None) -> np.ndarray[Any, Any]:
        """As `Tensor.to_numpy`; `payload` defaults to the frame this tensor came in."""
        return super().to_numpy(self._payload if payload is None else payload)


class InferenceResult(BaseModel):
    """Exactly one terminal result per request id: `ok` with outputs, or a named error."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    schema_version: Literal[1] = 1
    request_id: str
    model: str
    model_version: str | None = None
    status: Status
    error: ErrorInfo | None = None
    outputs: dict[str, OutputTensor] = Field(default_factory=dict)
    timings: Timings = Field(default_factory=Timings)
    batch_size: int | None = None
    worker_id: str | None = None
    provider: str | None = Field(default=None, description="Engine provider that ran the batch.")
    simulated: bool = Field(default=False, description="True when a `sim` engine produced it.")
    tenant: str | None = None
    completed_at: datetime | None = None

    _payload: bytes | memoryview | None = PrivateAttr(default=None)
    """A binary frame's bytes after the envelope, where `raw` outputs lie."""

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @classmethod
    def from_wire(cls, value: bytes) -> InferenceResult:
        """A result event as produced: JSON, or a binary frame whose outputs are raw bytes."""
        if not is_frame(value):
            return cls.model_validate_json(value)
        envelope, payload = split_frame(value)
        result = cls.model_validate_json(bytes(envelope))
        result._payload = payload
        for tensor in result.outputs.values():
            tensor._payload = payload
        return result

    def output(self, name: str) -> np.ndarray[Any, Any]:
        """One output as a read-only array, whichever form it travelled in (a frame's or
        base64's is a view of the result's bytes; one from lists is made read-only too, so
        code that works on one form works on all): `.copy()` it to change it."""
        array = self.outputs[name].to_numpy(self._payload)
        array.flags.writeable = False
        return array


def error_result(
    request_id: str,
    model: str,
    status: Status,
    message: str,
    *,
    model_version: str | None = None,
    tenant: str | None = None,
    timings: Timings | None = None,
    worker_id: str | None = None,
    completed_at: datetime | None = None,
) -> InferenceResult:
    """A terminal result that names what went wrong."""
    return InferenceResult(
        request_id=request_id,
        model=model,
        model_version=model_version,
        status=status,
        error=ErrorInfo(code=status, message=message),
        timings=timings or Timings(),
        worker_id=worker_id,
        tenant=tenant,
        completed_at=completed_at,
    )

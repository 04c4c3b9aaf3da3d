"""Terminal results as bytes, in the form the request came in.

Ingest's error answers and the worker's results are the same events with the same headers:
one encoder. Encoding writes the `InferenceResult` JSON directly (orjson), the same document
`InferenceResult.model_dump_json(exclude_none=True)` gives; a test holds them equal.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any, Literal

import numpy as np
import orjson

from schemas import headers as h
from schemas.frames import CONTENT_TYPE as FRAME_CONTENT_TYPE
from schemas.frames import join_frame
from schemas.result import Status
from schemas.tensors import DTYPES, dtype_name

OutputForm = Literal["frame", "b64", "list"]
"""How outputs travel: the request's form (frame in, frame out; b64 in, b64 out)."""

JSON_HEADERS: h.Headers = [(h.CONTENT_TYPE, h.JSON), (h.SCHEMA, h.RESULT_SCHEMA_V1)]
FRAME_HEADERS: h.Headers = [(h.CONTENT_TYPE, FRAME_CONTENT_TYPE), (h.SCHEMA, h.RESULT_SCHEMA_V1)]


def encode_result(
    *,
    request_id: str,
    model: str,
    status: Status,
    form: OutputForm = "list",
    outputs: Mapping[str, np.ndarray[Any, Any]] | None = None,
    error: str | None = None,
    model_version: str | None = None,
    timings: Mapping[str, float | None] | None = None,
    batch_size: int | None = None,
    worker_id: str | None = None,
    provider: str | None = None,
    simulated: bool = False,
    tenant: str | None = None,
    completed_at: str | None = None,
) -> bytes:
    """An `InferenceResult` as its wire bytes (a binary frame when `form` is frame)."""
    document: dict[str, Any] = {"schema_version": 1, "request_id": request_id, "model": model}
    if model_version is not None:
        document["model_version"] = model_version
    document["status"] = status
    if error is not None:
        document["error"] = {"code": status, "message": error}
    payload: list[bytes] = []
    document["outputs"] = _outputs(outputs or {}, form, payload)
    document["timings"] = {k: v for k, v in (timings or {}).items() if v is not None}
    for key, value in (
        ("batch_size", batch_size),
        ("worker_id", worker_id),
        ("provider", provider),
    ):
        if value is not None:
            document[key] = value
    document["simulated"] = simulated
    if tenant is not None:
        document["tenant"] = tenant
    if completed_at is not None:
        document["completed_at"] = completed_at
    envelope = orjson.dumps(document)
    return join_frame(envelope, payload) if form == "frame" else envelope


def _outputs(
    outputs: Mapping[str, np.ndarray[Any, Any]], form: OutputForm, payload: list[bytes]
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    offset = 0
    for name, array in outputs.items():
        wire_dtype = dtype_name(array.dtype)
        tensor: dict[str, Any] = {"dtype": wire_dtype, "shape": list(array.shape)}
        if form == "list":
            tensor["data"] = array.tolist()
        else:
            # tobytes() writes C order; astype copies only where the byte order differs.
            raw = array.astype(DTYPES[wire_dtype], copy=False).tobytes()
            if form == "b64":
                tensor["b64"] = base64.b64encode(raw).decode()
            else:
                tensor["raw"] = {"offset": offset, "nbytes": len(raw)}
                payload.append(raw)
                offset += len(raw)
        out[name] = tensor
    return out


def result_headers(form: OutputForm) -> h.Headers:
    """A fresh copy of a result's headers (trace context may be added to it)."""
    return list(FRAME_HEADERS if form == "frame" else JSON_HEADERS)

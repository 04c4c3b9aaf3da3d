"""Results encoded by hand equal the model's own JSON."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from schemas.frames import is_frame
from schemas.result import InferenceResult
from services.runtime.result_wire import encode_result

OUTPUTS = {
    "embedding": np.linspace(-1, 1, 12, dtype=np.float32).reshape(2, 6),
    "label": np.array([[3], [7]], dtype=np.int64),
}
FIELDS: dict[str, Any] = {
    "request_id": "r-1",
    "model": "demo-encoder",
    "model_version": "2",
    "timings": {"queue_ms": 1.5, "infer_ms": 3.25, "e2e_ms": 9.0, "batch_wait_ms": None},
    "batch_size": 8,
    "worker_id": "w-1",
    "provider": "CPUExecutionProvider",
    "tenant": "team-a",
    "completed_at": "2026-01-01T00:00:00Z",
}


@pytest.mark.parametrize("form", ["list", "b64", "frame"])
def test_an_ok_result_reads_back_as_the_model_would_write_it(form: str) -> None:
    value = encode_result(status="ok", form=form, outputs=OUTPUTS, **FIELDS)  # type: ignore[arg-type]

    result = InferenceResult.from_wire(value)

    assert is_frame(value) is (form == "frame")
    assert result.ok and result.error is None
    assert result.timings.batch_wait_ms is None and result.timings.infer_ms == 3.25
    for name, array in OUTPUTS.items():
        np.testing.assert_array_equal(result.output(name), array)
        np.testing.assert_array_equal(result.outputs[name].to_numpy(), array)
    if form != "frame":
        again = result.model_dump_json(exclude_none=True).encode()
        assert InferenceResult.model_validate_json(again) == result


def test_an_error_result_carries_code_and_message() -> None:
    value = encode_result(
        request_id="r-2", model="m", status="invalid_input", error="input 'x' is wrong"
    )
    result = InferenceResult.from_wire(value)
    assert result.status == "invalid_input"
    assert result.error is not None
    assert (result.error.code, result.error.message) == ("invalid_input", "input 'x' is wrong")
    assert result.outputs == {}

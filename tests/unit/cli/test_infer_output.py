"""`inferbus infer` prints outputs as numbers, whichever form the result travelled in."""

from __future__ import annotations

import json

import numpy as np
import pytest

from schemas.result import InferenceResult
from services.cli.infer import printable
from services.runtime.answers import encode_result

OUTPUTS = {
    "y": np.array([[0.25, -1.5, 3.0, 0.125]], dtype=np.float32),
    "label": np.array([[7]], dtype=np.int64),
}


@pytest.mark.parametrize("form", ["frame", "b64", "list"])
def test_printed_outputs_are_the_values(form: str) -> None:
    value = encode_result(
        request_id="r-1", model="demo-mlp", status="ok", form=form, outputs=OUTPUTS
    )
    printed = json.loads(
        printable(InferenceResult.from_wire(value)).model_dump_json(exclude_none=True)
    )
    for name, array in OUTPUTS.items():
        tensor = printed["outputs"][name]
        assert "raw" not in tensor and "b64" not in tensor
        assert (tensor["dtype"], tensor["shape"]) == (str(array.dtype), list(array.shape))
        assert tensor["data"] == array.tolist()


def test_an_error_result_prints_as_it_is() -> None:
    value = encode_result(request_id="r-2", model="m", status="invalid_input", error="bad x")
    result = InferenceResult.from_wire(value)
    assert printable(result) == result

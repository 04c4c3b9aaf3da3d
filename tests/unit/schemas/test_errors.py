"""Schema errors read as field paths and rules, one form per union: what a producer sees in
an `invalid_input` result."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from schemas.errors import describe_validation_error
from schemas.request import InferenceRequest


def _message(inputs: str) -> str:
    event = '{"request_id": "r", "model": "m", "inputs": ' + inputs + "}"
    with pytest.raises(ValidationError) as caught:
        InferenceRequest.model_validate_json(event)
    return describe_validation_error(caught.value)


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        pytest.param(
            '{"x": {"dtype": "complex64", "shape": [1], "data": [1]}}',
            "inputs.x.dtype: Input should be 'float32', 'float16', 'float64', 'int64', "
            "'int32', 'int16', 'int8', 'uint8' or 'bool'",
            id="a-tensor-answers-as-a-tensor",
        ),
        pytest.param(
            '{"x": {"text": 5}}',
            "inputs.x.text: Input should be a valid string; "
            "inputs.x.text: Input should be a valid array",
            id="text-answers-as-text",
        ),
        pytest.param(
            '{"x": {"dtype": "float32", "shape": [1]}}',
            "inputs.x: Value error, a tensor carries exactly one of `data` (nested list), "
            "`b64` or `raw`",
            id="a-tensor-rule",
        ),
        pytest.param('{"x": 5}', "inputs.x: Input should be an object", id="neither-said-once"),
        pytest.param(
            '{"x": {"data": [1]}}',
            "inputs.x.dtype: Field required; inputs.x.shape: Field required",
            id="no-text-key-means-a-tensor-however-little-it-has",
        ),
        pytest.param(
            '{"Tensor": {"dtype": "c", "shape": [1], "data": [1]}, "TextInput": {"text": 5}}',
            "inputs.Tensor.dtype: Input should be 'float32', 'float16', 'float64', 'int64', "
            "'int32', 'int16', 'int8', 'uint8' or 'bool'; inputs.TextInput.text: Input should "
            "be a valid string; inputs.TextInput.text: Input should be a valid array",
            id="inputs-named-like-the-forms-keep-their-names",
        ),
        pytest.param(
            '{"str": {"dtype": "complex64", "shape": [1], "data": [1]}}',
            "inputs.str.dtype: Input should be 'float32', 'float16', 'float64', 'int64', "
            "'int32', 'int16', 'int8', 'uint8' or 'bool'",
            id="an-input-named-like-a-label-keeps-its-name",
        ),
        pytest.param(
            "{}",
            "inputs: Dictionary should have at least 1 item after validation, not 0",
            id="no-union-involved",
        ),
    ],
)
def test_messages_name_fields_not_pydantic_labels(inputs: str, message: str) -> None:
    assert _message(inputs) == message


def test_an_error_in_every_item_gives_a_few_messages_and_a_count() -> None:
    message = _message('{"x": {"text": [' + ", ".join(["0"] * 20_000) + "]}}")
    assert message.startswith("inputs.x.text: Input should be a valid string; ")
    assert message.count("; ") == 4
    # pydantic's count: 20,000 items + the string form + the tensor form's two, less 5 shown.
    assert message.endswith("(+19998 more)")

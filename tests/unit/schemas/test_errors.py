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
            '{"Tensor": {"dtype": "c", "shape": [1], "data": [1]}}',
            "inputs.Tensor.dtype: Input should be 'float32', 'float16', 'float64', 'int64', "
            "'int32', 'int16', 'int8', 'uint8' or 'bool'",
            id="an-input-named-like-the-tensor-form-keeps-its-name",
        ),
        pytest.param(
            '{"TextInput": {"text": 5}}',
            "inputs.TextInput.text: Input should be a valid string; inputs.TextInput.text: "
            "Input should be a valid array",
            id="an-input-named-like-the-text-form-keeps-its-name",
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


BAD_EVERYWHERE = 100_000


@pytest.mark.parametrize(
    ("inputs", "metadata", "message"),
    [
        pytest.param(
            '{"x": {"text": [' + ", ".join(["0"] * BAD_EVERYWHERE) + "]}}",
            "{}",
            "inputs.x.text: Input should be a valid string; "
            "inputs.x.text.0: Input should be a valid string",
            id="text-list",
        ),
        pytest.param(
            '{"x": {"dtype": "float32", "data": [1], "shape": ['
            + ", ".join(['"a"'] * BAD_EVERYWHERE)
            + "]}}",
            "{}",
            "inputs.x.shape.0: Input should be a valid integer",
            id="shape",
        ),
        pytest.param(
            "{" + ", ".join(f'"i{k}": 1' for k in range(BAD_EVERYWHERE)) + "}",
            "{}",
            "inputs.i0: Input should be an object",
            id="inputs",
        ),
        pytest.param(
            '{"x": {"text": "a"}}',
            "{" + ", ".join(f'"k{k}": 1' for k in range(BAD_EVERYWHERE)) + "}",
            "metadata.k0: Input should be a valid string",
            id="metadata",
        ),
    ],
)
def test_a_list_or_map_stops_at_its_first_bad_item(
    inputs: str, metadata: str, message: str
) -> None:
    """An event that breaks a rule in each of 100,000 items costs one item's error, not
    100,000 (pydantic builds every error it finds: a 1 MB event held ingest's loop 3.3 s)."""
    event = f'{{"request_id": "r", "model": "m", "inputs": {inputs}, "metadata": {metadata}}}'
    with pytest.raises(ValidationError) as caught:
        InferenceRequest.model_validate_json(event)
    assert caught.value.error_count() <= 4  # the item, and the other forms of a union
    assert describe_validation_error(caught.value) == message


def test_more_counts_the_messages_left_out_not_pydantics_errors() -> None:
    event = (
        '{"request_id": "", "model": "", "tier": "x", "timeout_ms": 0, "reply_to": "a b", '
        '"inputs": {"x": {"dtype": "c", "shape": [], "data": [1]}}}'
    )
    with pytest.raises(ValidationError) as caught:
        InferenceRequest.model_validate_json(event)
    every = describe_validation_error(caught.value, limit=None).split("; ")
    # pydantic found 8; the text form's `text: Field required` is not this input's.
    assert caught.value.error_count() == 8 and len(every) == 7
    assert not any("text" in message for message in every)
    shown = describe_validation_error(caught.value)
    assert shown == "; ".join(every[:5]) + " (+2 more)"

"""Tensors on the wire: exactly one payload, decoding checks bytes and shape, round trips."""

from __future__ import annotations

import base64
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from pydantic import ValidationError

from infra.models.config import ModelConfig
from infra.models.inputs import validate_inputs
from schemas.errors import InvalidInput
from schemas.request import InferenceRequest
from schemas.tensors import DTYPES, Tensor, TensorDecodeError, TextInput, dtype_name


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        pytest.param({"shape": [1]}, "exactly one of", id="neither"),
        pytest.param(
            {"shape": [1], "data": [1], "b64": b64(b"\0" * 4)}, "exactly one of", id="both"
        ),
        pytest.param({"shape": [1, -2], "data": [[]]}, "negative dimension", id="negative-dim"),
        pytest.param({"shape": [], "data": 1}, "at least 1 item", id="scalar-shape"),
        pytest.param(
            {"shape": [1], "data": [1], "dtype": "complex64"}, "dtype", id="unknown-dtype"
        ),
        pytest.param({"shape": "1x16", "data": [1]}, "shape", id="shape-not-a-list"),
    ],
)
def test_invalid_tensors_are_refused(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        Tensor.model_validate({"dtype": "float32", **fields})


@pytest.mark.parametrize(
    ("data", "dtype", "expected"),
    [
        pytest.param([2**63 - 1, 1.0], "int64", [2**63 - 1, 1], id="int64-max-beside-a-float"),
        pytest.param([1.0, 2**62 + 1], "int64", [1, 2**62 + 1], id="big-int-beside-a-float"),
        pytest.param([1.0, 0.0], "bool", [True, False], id="whole-floats-for-bool"),
        pytest.param([None, 1], "float32", [math.nan, 1.0], id="null-is-nan-for-float"),
        pytest.param([], "int64", [], id="empty"),
    ],
)
def test_nested_lists_convert_exactly(data: list[Any], dtype: str, expected: list[Any]) -> None:
    shape = [len(data)]
    array = Tensor(dtype=dtype, shape=shape, data=data).to_numpy()  # type: ignore[arg-type]
    np.testing.assert_array_equal(array, np.asarray(expected, dtype=DTYPES[dtype]))


@pytest.mark.parametrize(
    ("tensor", "message"),
    [
        pytest.param(
            Tensor(dtype="float32", shape=[1, 4], b64=b64(b"\0" * 12)),
            "`b64` holds 12 bytes; shape [1, 4] of float32 needs 16",
            id="b64-short",
        ),
        pytest.param(
            Tensor(dtype="int64", shape=[2], b64=b64(b"\0" * 24)),
            "holds 24 bytes",
            id="b64-long",
        ),
        pytest.param(
            Tensor(dtype="int8", shape=[1], b64="%%%"), "not valid base64", id="b64-garbage"
        ),
        pytest.param(
            Tensor(dtype="float32", shape=[2, 2], data=[[1, 2], [3]]),
            "not a float32 nested list",
            id="ragged",
        ),
        pytest.param(
            Tensor(dtype="float32", shape=[1, 3], data=[[1, 2]]),
            "`data` has shape [1, 2] but the tensor declares [1, 3]",
            id="data-shape",
        ),
        pytest.param(
            Tensor(dtype="int64", shape=[1], data=[2**70]),
            "holds a number beyond int64's range",
            id="int-overflow",
        ),
        pytest.param(
            Tensor(dtype="int64", shape=[1], data=[9.223372036854775807e18]),
            "holds a number beyond int64's range",
            id="float-rounding-to-2**63",
        ),
        pytest.param(
            Tensor(dtype="int64", shape=[2], data=[-1, 2**63]),
            "holds a number beyond int64's range",
            id="one-past-int64",
        ),
        pytest.param(
            Tensor(dtype="int64", shape=[1], data=[None]),
            "holds null or values that are not numbers; the tensor is int64",
            id="null-for-int",
        ),
        pytest.param(
            Tensor(dtype="bool", shape=[2], data=[True, None]),
            "values other than 0 and 1; the tensor is bool",
            id="null-for-bool",
        ),
        pytest.param(
            Tensor(dtype="float32", shape=[1], data=[{"a": 1}]),
            "`data` holds values that are not numbers",
            id="object-in-data",
        ),
        pytest.param(
            Tensor(dtype="float32", shape=[1], data=["1.5"]),
            "`data` holds strings; the tensor is float32",
            id="numeric-string",
        ),
        pytest.param(
            Tensor(dtype="int64", shape=[2], data=[1, 2.5]),
            "`data` holds 2.5; the tensor is int64, which holds whole numbers",
            id="fraction-for-int",
        ),
        pytest.param(
            Tensor(dtype="int64", shape=[1], data=[1e20]),
            "`data` holds a number beyond int64's range",
            id="float-beyond-int64",
        ),
        pytest.param(
            Tensor(dtype="int8", shape=[1], data=[300]),
            "`data` holds a number beyond int8's range (-128 to 127)",
            id="beyond-int8",
        ),
        pytest.param(
            Tensor(dtype="uint8", shape=[1], data=[-1]),
            "beyond uint8's range (0 to 255)",
            id="negative-for-unsigned",
        ),
        pytest.param(
            Tensor(dtype="bool", shape=[1], data=[2]),
            "values other than 0 and 1; the tensor is bool",
            id="two-for-bool",
        ),
    ],
)
def test_decode_errors_name_the_problem(tensor: Tensor, message: str) -> None:
    with pytest.raises(TensorDecodeError) as info:
        tensor.to_numpy()
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("dtype", "data"),
    [
        pytest.param("float32", [[True, False]], id="float32"),
        pytest.param("float16", [True], id="float16"),
        pytest.param("float64", [False], id="float64"),
        pytest.param("float32", [True, None], id="beside-null"),
        pytest.param("float32", [[None, False]], id="beside-null-2d"),
        pytest.param("int64", [[True, True, False]], id="int64-mask"),
        pytest.param("int32", [True], id="int32"),
        pytest.param("uint8", [False], id="uint8"),
    ],
)
def test_true_and_false_are_not_numbers(dtype: str, data: list[Any]) -> None:
    """Regression: JSON true/false decoded as 1 and 0 in float and integer tensors."""
    shape = list(np.asarray(data, dtype=object).shape)
    tensor = Tensor(dtype=dtype, shape=shape, data=data)  # type: ignore[arg-type]
    with pytest.raises(TensorDecodeError) as info:
        tensor.to_numpy()
    assert f"`data` holds true or false; the tensor is {dtype}" in str(info.value)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        pytest.param([True, False], [True, False], id="booleans"),
        pytest.param([1, 0], [True, False], id="ones-and-zeros"),
    ],
)
def test_a_bool_tensor_still_takes_true_and_false(data: list[Any], expected: list[bool]) -> None:
    array = Tensor(dtype="bool", shape=[2], data=data).to_numpy()
    np.testing.assert_array_equal(array, np.asarray(expected))


def test_a_request_with_true_in_a_float_input_is_invalid_input_naming_it() -> None:
    config = ModelConfig.model_validate(
        {
            "name": "m",
            "inputs": [{"name": "x", "dtype": "float32", "shape": [-1, 2]}],
            "outputs": [{"name": "y", "dtype": "float32", "shape": [-1, 1]}],
        }
    )
    request = InferenceRequest.model_validate_json(
        '{"request_id": "r", "model": "m", "reply_to": "inferbus.results", '
        '"inputs": {"x": {"dtype": "float32", "shape": [1, 2], "data": [[true, false]]}}}'
    )
    with pytest.raises(InvalidInput, match=r"input 'x': `data` holds true or false") as info:
        validate_inputs(request, config, max_tensor_bytes=1 << 20, max_samples=4)
    assert info.value.status == "invalid_input"


@pytest.mark.parametrize("name", sorted(DTYPES))
@pytest.mark.parametrize("encoding", ["list", "b64"])
def test_every_dtype_round_trips(name: str, encoding: str) -> None:
    array = (np.arange(6).reshape(2, 3) % 2).astype(DTYPES[name])

    tensor = Tensor.from_numpy(array, encoding=encoding)
    decoded = Tensor.model_validate_json(tensor.model_dump_json()).to_numpy()

    assert tensor.dtype == name
    assert decoded.dtype == DTYPES[name]
    np.testing.assert_array_equal(decoded, array)


def test_big_endian_and_non_contiguous_arrays_encode_as_little_endian() -> None:
    array = np.arange(12, dtype=">f4").reshape(3, 4)[:, ::2]

    tensor = Tensor.from_numpy(array, encoding="b64")

    assert tensor.dtype == "float32"
    np.testing.assert_array_equal(tensor.to_numpy(), array.astype("<f4"))


@pytest.mark.parametrize(
    "dtype",
    [pytest.param(np.dtype("complex64"), id="complex"), pytest.param(np.dtype("U4"), id="str")],
)
def test_dtypes_not_on_the_wire_are_refused(dtype: np.dtype[Any]) -> None:
    with pytest.raises(TensorDecodeError, match="not carried on the wire"):
        dtype_name(dtype)


@given(
    array=hnp.arrays(
        dtype=st.sampled_from([np.dtype("<f4"), np.dtype("<i8"), np.dtype("u1"), np.dtype("?")]),
        shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=4),
    ),
    encoding=st.sampled_from(["list", "b64"]),
)
def test_round_trip_property(array: np.ndarray[Any, Any], encoding: str) -> None:
    decoded = Tensor.from_numpy(array, encoding=encoding).to_numpy()

    assert list(decoded.shape) == list(array.shape)
    np.testing.assert_array_equal(decoded, array)


@pytest.mark.parametrize(
    ("text", "texts"),
    [
        pytest.param("one", ["one"], id="string"),
        pytest.param(["a", "b"], ["a", "b"], id="list"),
        pytest.param([], [], id="empty-list"),
    ],
)
def test_text_input_samples(text: str | list[str], texts: list[str]) -> None:
    assert TextInput(text=text).texts() == texts

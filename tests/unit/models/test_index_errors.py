"""index_errors checks a poll of requests' token ids, masks and table rows at once, and
gives each request the error it would get alone."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infra.models.config import ModelConfig
from infra.models.inputs import _check_indices, index_errors
from schemas.errors import InvalidInput
from schemas.tensors import Arrays
from services.models.demo import encoder_config
from tests.unit.models.test_lookups import typed_config

ENCODER = encoder_config()  # input_ids and attention_mask, max_length 512
TYPED = typed_config()  # input_ids, token_type_ids (also a table of 2), bucket; max_length 16
# One input named as both mask and token types (valid, if odd): it keeps both rules.
TWICE = ENCODER.model_copy(
    update={
        "name": "twice",
        "tokenizer": ENCODER.tokenizer.model_copy(update={"token_type_ids": "attention_mask"}),
    }
)
LIMITS: dict[str, dict[str, int]] = {
    "demo-encoder": {"input_ids": 50},
    "typed": {"input_ids": 50, "token_type_ids": 2, "bucket": 10},
    "twice": {"input_ids": 50, "attention_mask": 10},
}
COMPANION = {"demo-encoder": "attention_mask", "typed": "token_type_ids", "twice": "attention_mask"}


def alone(arrays: Arrays, config: ModelConfig, limits: dict[str, int]) -> str | None:
    try:
        _check_indices(arrays, config, limits)
    except InvalidInput as exc:
        return exc.message
    return None


@st.composite
def requests(draw: st.DrawFn, config: ModelConfig) -> Arrays:
    rows = draw(st.integers(1, 2))
    tokens = draw(st.integers(1, 20))
    ints = np.int64

    def table(low: int, high: int, shape: tuple[int, ...]) -> np.ndarray[Any, Any]:
        values = draw(st.lists(st.integers(low, high), min_size=1, max_size=1))[0]
        array = np.full(shape, values, dtype=ints)
        if draw(st.booleans()):  # one value elsewhere in range, one maybe out of it
            array.flat[draw(st.integers(0, array.size - 1))] = draw(st.integers(low, high))
        return array

    arrays: Arrays = {"input_ids": table(-2, 55, (rows, tokens))}
    companion_shape = (rows, tokens + draw(st.sampled_from([0, 0, 0, 0, 1])))
    dtype = draw(st.sampled_from(["int64", "int64", "int32", "uint8", "bool"]))
    companion = table(0 if dtype in ("uint8", "bool") else -1, 3, companion_shape)
    arrays[COMPANION[config.name]] = companion.astype(dtype)
    if config.name == "typed":
        arrays["bucket"] = table(-12, 11, (rows,)).astype(np.int32)
    return arrays


@settings(max_examples=300, deadline=None)
@given(data=st.data(), config=st.sampled_from([ENCODER, TYPED, TWICE]))
def test_a_poll_gets_the_messages_each_request_gets_alone(
    data: st.DataObject, config: ModelConfig
) -> None:
    polled = data.draw(st.lists(requests(config), max_size=6))
    limits = LIMITS[config.name]

    got = [e.message if e is not None else None for e in index_errors(polled, config, limits)]

    assert got == [alone(arrays, config, limits) for arrays in polled]


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        pytest.param(
            {"input_ids": [[5, -5]]}, "token id -5; ids are never negative", id="negative"
        ),
        pytest.param({"input_ids": [[5, 50]]}, "token id 50;.*vocabulary of 50", id="past-vocab"),
        pytest.param({"attention_mask": [[1, 2]]}, "may hold only 0 and 1", id="mask-two"),
        pytest.param({"attention_mask": [[1]]}, "must match 'input_ids'", id="mask-shape"),
        pytest.param(
            {"attention_mask": [[0, 0]]}, "all 0s in sample 0: no token to read", id="mask-zeros"
        ),
        pytest.param(
            {"input_ids": [[]], "attention_mask": [[]]},
            r"'input_ids' holds no tokens \(shape \[1, 0\]\)",
            id="no-tokens",
        ),
    ],
)
def test_one_bad_request_in_a_poll_is_named_and_the_rest_pass(
    bad: dict[str, list[list[int]]], message: str
) -> None:
    good = {"input_ids": np.array([[5, 6]]), "attention_mask": np.array([[1, 1]])}
    poisoned = {**good, **{name: np.array(values, dtype=np.int64) for name, values in bad.items()}}

    errors = index_errors([good, poisoned, good], ENCODER, LIMITS["demo-encoder"])

    assert errors[0] is None and errors[2] is None
    assert errors[1] is not None
    with pytest.raises(InvalidInput, match=message):
        raise errors[1]


def test_an_empty_poll_checks_nothing() -> None:
    assert index_errors([], ENCODER, {}) == []

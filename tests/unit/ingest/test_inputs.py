"""validate_inputs returns decoded arrays, texts and the sample count; shape specs match -1."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infra.models.config import TensorSpec, TierSlo
from infra.models.inputs import _all_below, index_errors, tensor_nbytes, validate_inputs
from schemas.errors import InvalidInput
from schemas.request import InferenceRequest
from schemas.tensors import Tensor
from services.models.demo import encoder_config, mlp_config
from tests.unit.ingest.conftest import with_changes


def request(model: str, inputs: dict[str, Any]) -> InferenceRequest:
    return InferenceRequest.model_validate({"request_id": "r", "model": model, "inputs": inputs})


@pytest.mark.parametrize(
    ("spec", "shape", "matches"),
    [
        pytest.param([-1, 16], [1, 16], True, id="dynamic-batch"),
        pytest.param([-1, 16], [64, 16], True, id="large-batch"),
        pytest.param([-1, 16], [1, 15], False, id="fixed-dim-differs"),
        pytest.param([-1, 16], [16], False, id="rank-lower"),
        pytest.param([-1, 16], [1, 16, 1], False, id="rank-higher"),
        pytest.param([-1, -1], [3, 700], True, id="all-dynamic"),
        pytest.param([2, 3], [2, 3], True, id="all-fixed"),
    ],
)
def test_matches_shape(spec: list[int], shape: list[int], matches: bool) -> None:
    assert TensorSpec(name="x", dtype="float32", shape=spec).matches_shape(shape) is matches


def test_tensor_inputs_decode_to_arrays() -> None:
    data = np.arange(32, dtype=np.float32).reshape(2, 16)

    arrays, texts, samples = validate_inputs(
        request("demo-mlp", {"x": {"dtype": "float32", "shape": [2, 16], "data": data.tolist()}}),
        mlp_config(),
        max_tensor_bytes=1024,
        max_samples=4,
    )

    assert texts is None
    assert samples == 2
    np.testing.assert_array_equal(arrays["x"], data)
    assert arrays["x"].dtype == np.float32


def test_text_inputs_return_texts_and_no_arrays() -> None:
    arrays, texts, samples = validate_inputs(
        request("demo-encoder", {"text": {"text": ["a", "b", "c"]}}),
        encoder_config(),
        max_tensor_bytes=1024,
        max_samples=4,
    )

    assert (arrays, texts, samples) == ({}, ["a", "b", "c"], 3)


def test_too_many_texts_are_refused() -> None:
    with pytest.raises(InvalidInput, match="5 samples; the limit is 4"):
        validate_inputs(
            request("demo-encoder", {"text": {"text": ["t"] * 5}}),
            encoder_config(),
            max_tensor_bytes=1024,
            max_samples=4,
        )


@pytest.mark.parametrize(
    ("dtype", "shape", "nbytes"),
    [
        pytest.param("float32", [1, 16], 64, id="f32"),
        pytest.param("int64", [2, 512], 8192, id="i64"),
        pytest.param("bool", [3], 3, id="bool"),
        pytest.param("float16", [0, 4], 0, id="empty"),
    ],
)
def test_tensor_nbytes_from_declared_shape(dtype: str, shape: list[int], nbytes: int) -> None:
    assert tensor_nbytes(Tensor(dtype=dtype, shape=shape, data=[])) == nbytes  # type: ignore[arg-type]


def test_slo_for_a_tier_missing_from_the_config_falls_back_to_defaults() -> None:
    config = with_changes(mlp_config(), slo={"critical": {"p99_e2e_ms": 50, "max_queue": 7}})

    assert config.slo_for("critical") == TierSlo(p99_e2e_ms=50, max_queue=7)
    assert config.slo_for("batch").max_queue == 100_000


def vocabulary(size: int | None) -> dict[str, int]:
    """The worker's limits when its tokenizer has `size` ids (None: ingest, none known)."""
    return {} if size is None else {"input_ids": size}


def encoder_ids(ids: list[list[int]]) -> dict[str, Any]:
    shape = [len(ids), len(ids[0])]
    return {
        "input_ids": {"dtype": "int64", "shape": shape, "data": ids},
        "attention_mask": {"dtype": "int64", "shape": shape, "data": [[1] * shape[1]] * shape[0]},
    }


@pytest.mark.parametrize(
    ("ids", "vocab_size", "message"),
    [
        pytest.param([[5, -5]], None, "token id -5; ids are never negative", id="negative"),
        pytest.param([[5, 99_999]], 1000, "token id 99999;.*vocabulary of 1000", id="beyond-vocab"),
        pytest.param([[7] * 513], None, "holds 513 tokens;.*at most 512", id="longer-than-max"),
        pytest.param([[]], None, r"'input_ids' holds no tokens \(shape \[1, 0\]\)", id="no-tokens"),
        pytest.param(
            [[], []], 1000, r"holds no tokens \(shape \[2, 0\]\); each sample", id="no-tokens-2"
        ),
    ],
)
def test_token_ids_sent_as_tensors_obey_the_tokenizer(
    ids: list[list[int]], vocab_size: int | None, message: str
) -> None:
    with pytest.raises(InvalidInput, match=message):
        validate_inputs(
            request("demo-encoder", encoder_ids(ids)),
            encoder_config(),
            max_tensor_bytes=1 << 20,
            max_samples=4,
            index_limits=vocabulary(vocab_size),
        )


@pytest.mark.parametrize("deferred", [False, True], ids=["checked-here", "left-to-the-poll"])
@pytest.mark.parametrize(
    ("ids", "message"),
    [
        pytest.param([[5, -5]] * 33, "token id -5; ids are never negative", id="bad-ids-win"),
        pytest.param([[5, 1000]] * 33, "token id 1000;.*vocabulary of 1000", id="past-vocab-wins"),
        pytest.param([[5, 6]] * 33, "holds 33 samples;.*at most 32", id="only-too-many"),
    ],
)
def test_a_request_with_bad_values_and_too_many_samples_hears_of_its_values(
    ids: list[list[int]], message: str, deferred: bool
) -> None:
    """Ingest and the worker (whose checks of values wait for the poll while a request is
    otherwise good) give the same first message."""
    with pytest.raises(InvalidInput, match=message):
        validate_inputs(
            request("demo-encoder", encoder_ids(ids)),
            encoder_config(),
            max_tensor_bytes=1 << 20,
            max_samples=64,
            index_limits=vocabulary(1000),
            check_indices=not deferred,
        )


@pytest.mark.parametrize(
    ("mask", "message"),
    [
        pytest.param(
            [[1, 1]], r"'attention_mask' has shape \[1, 2\]; .*'input_ids''s \[1, 5\]", id="shorter"
        ),
        pytest.param([[1] * 600], r"has shape \[1, 600\]", id="longer"),
        pytest.param([[1, 1], [1, 1]], r"disagree on the batch dimension", id="more-rows"),
        pytest.param([[1, 1, 2, 0, 0]], "may hold only 0 and 1", id="a-two"),
        pytest.param([[1, 1, -1, 0, 0]], "may hold only 0 and 1", id="negative"),
        pytest.param(
            [[0, 0, 0, 0, 0]],
            r"'attention_mask' is all 0s in sample 0: no token to read",
            id="all-zeros",
        ),
    ],
)
def test_an_attention_mask_must_fit_its_token_ids(mask: list[list[int]], message: str) -> None:
    inputs = encoder_ids([[5, 6, 7, 8, 9]])
    inputs["attention_mask"] = {
        "dtype": "int64",
        "shape": [len(mask), len(mask[0])],
        "data": mask,
    }
    with pytest.raises(InvalidInput, match=message):
        validate_inputs(
            request("demo-encoder", inputs),
            encoder_config(),
            max_tensor_bytes=1 << 20,
            max_samples=4,
            index_limits=vocabulary(1000),
        )


def refusal(inputs: dict[str, Any], *, deferred: bool) -> str:
    """What demo-encoder's request is refused with: at ingest (`deferred` False) or by the
    worker, whose value checks wait for the poll (`index_errors`, among good requests)."""
    config = encoder_config()
    try:
        arrays, _, _ = validate_inputs(
            request("demo-encoder", inputs),
            config,
            max_tensor_bytes=1 << 20,
            max_samples=4,
            index_limits=vocabulary(1000),
            check_indices=not deferred,
        )
    except InvalidInput as exc:
        return exc.message
    good = {"input_ids": np.array([[5]]), "attention_mask": np.array([[1]])}
    first, error, last = index_errors([good, arrays, good], config, vocabulary(1000))
    assert first is None and last is None and error is not None
    return error.message


@pytest.mark.parametrize("deferred", [False, True], ids=["ingest", "worker-poll"])
@pytest.mark.parametrize(
    ("ids", "mask", "message"),
    [
        pytest.param(
            [[5, 6], [7, 8]],
            [[1, 0], [0, 0]],
            "input 'attention_mask' is all 0s in sample 1: no token to read; each sample "
            "needs at least one 1",
            id="a-sample-masked-out",
        ),
        pytest.param(
            [[], []],
            [[], []],
            "input 'input_ids' holds no tokens (shape [2, 0]); each sample needs at least one",
            id="no-tokens",
        ),
    ],
)
def test_a_sample_of_no_tokens_is_refused_as_blank_text_is(
    ids: list[list[int]], mask: list[list[int]], message: str, deferred: bool
) -> None:
    """Answered `ok` with zeros before; ingest and the worker's poll check say the same."""
    inputs = encoder_ids(ids)
    inputs["attention_mask"]["data"] = mask
    assert refusal(inputs, deferred=deferred) == message


@pytest.mark.parametrize(
    ("ids", "vocab_size"),
    [
        pytest.param([[0, 999]], 1000, id="both-ends-of-the-vocabulary"),
        pytest.param([[7] * 512], None, id="exactly-max-length"),
        pytest.param([[5, 99_999]], None, id="vocabulary-unknown-here-ingest"),
    ],
)
def test_token_ids_within_the_rules_pass(ids: list[list[int]], vocab_size: int | None) -> None:
    arrays, _, samples = validate_inputs(
        request("demo-encoder", encoder_ids(ids)),
        encoder_config(),
        max_tensor_bytes=1 << 20,
        max_samples=4,
        index_limits=vocabulary(vocab_size),
    )

    assert samples == 1 and arrays["input_ids"].shape == (1, len(ids[0]))


def test_a_request_larger_than_the_models_batch_is_refused_at_ingest_not_later() -> None:
    """Ingest's limit was 64 while the worker ran at most 32: 33-64 samples were routed,
    then refused by the worker."""
    config = mlp_config()
    samples = config.batching.max_batch_size + 1
    data = np.zeros((samples, 16), dtype=np.float32).tolist()

    with pytest.raises(InvalidInput, match=r"runs at most 32 in a batch \(batching.max_batch_size"):
        validate_inputs(
            request("demo-mlp", {"x": {"dtype": "float32", "shape": [samples, 16], "data": data}}),
            config,
            max_tensor_bytes=1 << 20,
            max_samples=64,
        )


@settings(max_examples=300, deadline=None)
@given(
    dtype=st.sampled_from(["<i1", "<i2", "<i4", "<i8", "u1", "<u2", "<u4", "<u8", ">i4"]),
    data=st.data(),
    bound=st.one_of(st.none(), st.integers(min_value=1, max_value=2**65)),
)
def test_the_one_pass_range_check_agrees_with_min_and_max(
    dtype: str, data: st.DataObject, bound: int | None
) -> None:
    """`_all_below` (one reduction over an unsigned view) answers as min and max would,
    bounds beyond the type's range, negatives and the extremes of each width included."""
    info = np.iinfo(np.dtype(dtype))
    values = data.draw(
        st.lists(st.integers(min_value=int(info.min), max_value=int(info.max)), max_size=40)
    )
    array = np.array(values, dtype=dtype).reshape(1, -1)
    expected = not values or (min(values) >= 0 and (bound is None or max(values) < bound))
    assert _all_below(array, bound) is expected

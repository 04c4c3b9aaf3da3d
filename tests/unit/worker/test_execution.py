"""run_batch: stack and pad, infer, split; an engine failure is retried in halves, then per
request, so only the poisoned request ends as an error."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from infra.models.config import ModelConfig
from services.models.demo import encoder_config, mlp_config
from services.worker.execution import assemble, run_batch, sequence_inputs, split

Arrays = dict[str, np.ndarray[Any, Any]]
POISON = -999.0
MLP = mlp_config()
ENCODER = encoder_config()


def mlp_request(value: float, samples: int = 1) -> Arrays:
    return {"x": np.full((samples, 16), value, dtype=np.float32)}


def encoder_request(length: int, samples: int = 1, token: int = 7) -> Arrays:
    return {
        "input_ids": np.full((samples, length), token, dtype=np.int64),
        "attention_mask": np.ones((samples, length), dtype=np.int64),
    }


class FakeEngine:
    """y = 2·x[:, :4]; raises when any sample in the batch is poisoned."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def __call__(self, batch: Mapping[str, np.ndarray[Any, Any]]) -> Arrays:
        x = batch["x"]
        self.calls.append(int(x.shape[0]))
        if (x == POISON).any():
            raise RuntimeError("CUDA out of memory (poisoned sample)")
        return {"y": x[:, :4] * 2}


# ---- assemble and split --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        pytest.param(MLP, set(), id="mlp-none"),
        pytest.param(ENCODER, {"input_ids", "attention_mask"}, id="encoder-both"),
    ],
)
def test_sequence_inputs(config: ModelConfig, expected: set[str]) -> None:
    assert sequence_inputs(config) == expected


def test_assemble_concatenates_on_the_batch_axis() -> None:
    batch = assemble([mlp_request(1.0), mlp_request(2.0, samples=2)], MLP, None)

    assert batch["x"].shape == (3, 16)
    np.testing.assert_array_equal(batch["x"][:, 0], [1.0, 2.0, 2.0])


@pytest.mark.parametrize(
    ("lengths", "pad_length", "width"),
    [
        pytest.param([3, 5], None, 5, id="to-longest"),
        pytest.param([3, 5], 8, 8, id="to-bucket"),
        pytest.param([3, 9], 8, 9, id="longer-than-bucket"),
        pytest.param([4], 4, 4, id="single-exact"),
        pytest.param([2], 32, 32, id="single-padded"),
    ],
)
def test_assemble_pads_sequences(lengths: list[int], pad_length: int | None, width: int) -> None:
    config = ModelConfig.model_validate(
        {**ENCODER.model_dump(), "batching": {**ENCODER.batching.model_dump(), "pad_token_id": 3}}
    )
    requests = [encoder_request(n) for n in lengths]

    batch = assemble(requests, config, pad_length)

    assert batch["input_ids"].shape == (len(lengths), width)
    assert batch["attention_mask"].shape == (len(lengths), width)
    for row, n in enumerate(lengths):
        assert (batch["input_ids"][row, :n] == 7).all()
        assert (batch["input_ids"][row, n:] == 3).all()  # the pad token
        assert (batch["attention_mask"][row, :n] == 1).all()
        assert (batch["attention_mask"][row, n:] == 0).all()  # masks pad with 0


@pytest.mark.parametrize(
    ("samples", "sizes"),
    [
        pytest.param([1], [1], id="one"),
        pytest.param([1, 1, 1], [1, 1, 1], id="singles"),
        pytest.param([2, 1, 3], [2, 1, 3], id="mixed"),
    ],
)
def test_split_cuts_outputs_back_per_request(samples: list[int], sizes: list[int]) -> None:
    total = sum(samples)
    outputs = {"y": np.arange(total * 2).reshape(total, 2), "z": np.arange(total)}

    pieces = split(outputs, samples)

    assert [piece["y"].shape[0] for piece in pieces] == sizes
    np.testing.assert_array_equal(np.concatenate([p["z"] for p in pieces]), outputs["z"])


# ---- run_batch -----------------------------------------------------------------------------


def test_healthy_batch_runs_once() -> None:
    engine = FakeEngine()
    requests = [mlp_request(float(i), samples=1 + i % 2) for i in range(5)]
    samples = [r["x"].shape[0] for r in requests]

    outcomes = run_batch(engine, requests, samples, MLP, None)

    assert engine.calls == [sum(samples)]
    for request, outcome in zip(requests, outcomes, strict=True):
        assert outcome.error is None
        assert outcome.outputs is not None
        np.testing.assert_array_equal(outcome.outputs["y"], request["x"][:, :4] * 2)
        assert outcome.batch_size == sum(samples)
        assert outcome.infer_ms >= 0 and outcome.assemble_ms >= 0 and outcome.split_ms >= 0


@pytest.mark.parametrize(
    ("count", "poisoned", "calls"),
    [
        pytest.param(1, {0}, [1], id="single-poisoned"),
        pytest.param(2, {0}, [2, 1, 1], id="pair-first"),
        pytest.param(4, {3}, [4, 2, 2, 1, 1], id="four-last"),
        pytest.param(8, {5}, [8, 4, 4, 2, 1, 1, 2], id="eight-one-bad"),
        pytest.param(4, {0, 3}, [4, 2, 1, 1, 2, 1, 1], id="two-bad-in-different-halves"),
        pytest.param(4, {0, 1, 2, 3}, [4, 2, 1, 1, 2, 1, 1], id="all-bad"),
        pytest.param(3, {1}, [3, 1, 2, 1, 1], id="odd-size"),
    ],
)
def test_engine_failure_retries_halves_then_singles(
    count: int, poisoned: set[int], calls: list[int]
) -> None:
    engine = FakeEngine()
    requests = [mlp_request(POISON if i in poisoned else float(i)) for i in range(count)]

    outcomes = run_batch(engine, requests, [1] * count, MLP, None)

    assert engine.calls == calls
    assert len(outcomes) == count
    for i, outcome in enumerate(outcomes):
        if i in poisoned:
            assert outcome.outputs is None
            assert outcome.error is not None
            assert "RuntimeError: CUDA out of memory" in outcome.error
            assert outcome.batch_size == 1
        else:
            assert outcome.error is None
            assert outcome.outputs is not None
            np.testing.assert_array_equal(outcome.outputs["y"], np.full((1, 4), 2.0 * i))


def test_error_message_is_bounded() -> None:
    def infer(batch: Mapping[str, np.ndarray[Any, Any]]) -> Arrays:
        raise ValueError("x" * 10_000)

    [outcome] = run_batch(infer, [mlp_request(1.0)], [1], MLP, None)

    assert outcome.error is not None
    assert len(outcome.error) == 500


def test_requests_that_cannot_be_stacked_are_answered_one_by_one() -> None:
    """Regression: assemble() raised outside the retry, losing the whole batch."""
    config = ModelConfig.model_validate(
        {
            "name": "ragged",
            "inputs": [{"name": "x", "dtype": "float32", "shape": [-1, -1]}],
            "outputs": [{"name": "y", "dtype": "float32", "shape": [-1, -1]}],
        }
    )
    requests = [{"x": np.ones((1, n), dtype=np.float32) * n} for n in (3, 5, 3)]

    outcomes = run_batch(lambda batch: {"y": batch["x"] * 2}, requests, [1, 1, 1], config, None)

    assert [o.error for o in outcomes] == [None, None, None]
    for n, outcome in zip((3, 5, 3), outcomes, strict=True):
        assert outcome.outputs is not None
        np.testing.assert_array_equal(outcome.outputs["y"], np.full((1, n), 2.0 * n))


def test_a_request_too_long_for_the_model_fails_alone_not_its_batch_mates() -> None:
    """Regression: the batch was padded to the 600-token request, and the retries of its
    halves and singles kept that padding, so every batch-mate failed with it."""
    limit = 512

    def infer(batch: Mapping[str, np.ndarray[Any, Any]]) -> Arrays:
        width = batch["input_ids"].shape[1]
        if width > limit:
            raise ValueError(f"position embeddings stop at {limit}, got {width}")
        return {"embedding": np.ones((batch["input_ids"].shape[0], 4), np.float32)}

    requests = [encoder_request(600), encoder_request(300), encoder_request(20)]

    outcomes = run_batch(infer, requests, [1, 1, 1], ENCODER, 600)

    assert outcomes[0].error is not None and "stop at 512" in outcomes[0].error
    assert [o.error for o in outcomes[1:]] == [None, None]


@pytest.mark.parametrize(
    "outputs",
    [
        pytest.param({"y": np.zeros((2, 4), np.float32)}, id="too-few-rows"),
        pytest.param({"y": np.zeros((4, 4), np.float32)}, id="too-many-rows"),
        pytest.param({"y": np.float32(1.0)}, id="scalar"),
        pytest.param({"y": np.zeros((3, 4)), "z": np.zeros(1)}, id="one-output-wrong"),
    ],
)
def test_outputs_without_one_row_per_sample_are_errors_not_ok(outputs: Arrays) -> None:
    """Regression: split() handed out short or empty slices, answered `ok`."""

    def infer(batch: Mapping[str, np.ndarray[Any, Any]]) -> Arrays:
        return outputs if batch["x"].shape[0] == 3 else {"y": batch["x"][:, :4]}

    outcomes = run_batch(infer, [mlp_request(1.0, samples=3)], [3], MLP, None)

    assert outcomes[0].outputs is None
    assert outcomes[0].error is not None
    assert "EngineError: engine returned outputs" in outcomes[0].error


@given(
    flags=st.lists(st.booleans(), min_size=1, max_size=24),
    sizes=st.lists(st.integers(1, 3), min_size=24, max_size=24),
)
def test_only_poisoned_requests_fail(flags: list[bool], sizes: list[int]) -> None:
    engine = FakeEngine()
    samples = sizes[: len(flags)]
    requests = [
        mlp_request(POISON if bad else float(i), samples=n)
        for i, (bad, n) in enumerate(zip(flags, samples, strict=True))
    ]

    outcomes = run_batch(engine, requests, samples, MLP, None)

    assert len(outcomes) == len(requests)
    for i, (bad, outcome) in enumerate(zip(flags, outcomes, strict=True)):
        assert (outcome.error is not None) is bad
        if not bad:
            assert outcome.outputs is not None
            np.testing.assert_array_equal(
                outcome.outputs["y"], np.full((samples[i], 4), 2.0 * i, dtype=np.float32)
            )
    # Halving bounds the work: at most 2n - 1 engine calls for n requests.
    assert len(engine.calls) <= 2 * len(requests) - 1


# ---- token-level outputs ---------------------------------------------------------------------

TOKENS = ModelConfig.model_validate(
    {
        **ENCODER.model_dump(),
        "outputs": [
            {"name": "per_token", "dtype": "int64", "shape": [-1, -1]},
            {"name": "per_token_wide", "dtype": "int64", "shape": [-1, -1, 2]},
            {"name": "pooled", "dtype": "int64", "shape": [-1, 2]},
            {"name": "top2", "dtype": "int64", "shape": [-1, -1]},
        ],
        "batching": {**ENCODER.batching.model_dump(), "length_buckets": [8, 16]},
    }
)


def token_engine(batch: Mapping[str, np.ndarray[Any, Any]]) -> Arrays:
    """Echoes input_ids per token, pools them, and keeps a dynamic axis that is no sequence."""
    ids = batch["input_ids"]
    return {
        "per_token": ids,
        "per_token_wide": np.stack([ids, ids], axis=-1),
        "pooled": np.stack([ids.sum(axis=1), ids.shape[1] + 0 * ids[:, 0]], axis=-1),
        "top2": ids[:, :2],
    }


@pytest.mark.parametrize(
    "lengths",
    [
        pytest.param([3, 10], id="short-beside-long"),
        pytest.param([5], id="alone-padded-to-its-bucket"),
        pytest.param([16, 16], id="no-padding"),
    ],
)
def test_a_token_level_output_is_as_long_as_the_requests_own_input(lengths: list[int]) -> None:
    """Regression: each request got as many rows as its padded batch (16 for a 3-token
    request beside a 10-token one), so its answer depended on its batch-mates."""
    requests = [encoder_request(n, token=n) for n in lengths]
    pad = 8 if max(lengths) <= 8 else 16

    outcomes = run_batch(token_engine, requests, [1] * len(requests), TOKENS, pad)

    for n, outcome in zip(lengths, outcomes, strict=True):
        assert outcome.outputs is not None
        np.testing.assert_array_equal(outcome.outputs["per_token"], np.full((1, n), n))
        assert outcome.outputs["per_token_wide"].shape == (1, n, 2)
        assert outcome.outputs["pooled"].shape == (1, 2)  # no sequence axis: as it came
        assert outcome.outputs["top2"].shape == (1, 2)  # dynamic, not the sequence: kept

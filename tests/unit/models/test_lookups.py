"""Which inputs a graph reads as table rows, and requests refused when they point past them."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import yaml
from onnx import TensorProto, helper, numpy_helper

from infra.models.config import ModelConfig
from infra.models.inputs import validate_inputs
from infra.models.lookups import lookup_rows, merged_limits, model_lookup_rows
from infra.models.repository import ModelRepository
from schemas.errors import InvalidInput
from schemas.request import InferenceRequest
from services.models.demo import demo_vocab, write_demo_models
from services.worker.engine_host import EngineHost, input_rules_for
from services.worker.engines.shapes import sample_batch


def table(name: str, rows: int, width: int = 4) -> TensorProto:
    return numpy_helper.from_array(np.zeros((rows, width), dtype=np.float32), name)


def graph(nodes: list[onnx.NodeProto], tables: list[TensorProto]) -> onnx.GraphProto:
    inputs = [
        helper.make_tensor_value_info(name, TensorProto.INT64, ["N", "S"])
        for name in ("ids", "types", "other")
    ]
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    return helper.make_graph(nodes, "g", inputs, [out], initializer=tables)


@pytest.mark.parametrize(
    ("nodes", "tables", "expected"),
    [
        pytest.param(
            [helper.make_node("Gather", ["word", "ids"], ["y"])],
            [table("word", 100)],
            {"ids": 100},
            id="direct",
        ),
        pytest.param(
            [
                helper.make_node("Cast", ["types"], ["t64"], to=TensorProto.INT64),
                helper.make_node("Gather", ["type_table", "t64"], ["y"]),
            ],
            [table("type_table", 2)],
            {"types": 2},
            id="through-a-cast",
        ),
        pytest.param(
            [helper.make_node("Gather", ["word", "ids"], ["y"], axis=1)],
            [table("word", 100, width=7)],
            {"ids": 7},
            id="axis-1-counts-columns",
        ),
        pytest.param(
            [
                helper.make_node("Gather", ["big", "ids"], ["a"]),
                helper.make_node("Gather", ["small", "ids"], ["y"]),
            ],
            [table("big", 100), table("small", 30)],
            {"ids": 30},
            id="the-smallest-of-two-tables",
        ),
        pytest.param(
            [
                helper.make_node("Add", ["ids", "other"], ["sum"]),
                helper.make_node("Gather", ["word", "sum"], ["y"]),
            ],
            [table("word", 100)],
            {},
            id="a-computed-index-is-not-the-inputs",
        ),
        pytest.param(
            [helper.make_node("Gather", ["other", "ids"], ["y"])],
            [],
            {},
            id="data-that-is-no-weight",
        ),
    ],
)
def test_lookup_rows_finds_the_tables_an_input_indexes(
    nodes: list[onnx.NodeProto], tables: list[TensorProto], expected: dict[str, int]
) -> None:
    assert lookup_rows(graph(nodes, tables)) == expected


def test_merged_limits_keeps_the_smallest_bound() -> None:
    assert merged_limits({"ids": 100}, {"ids": 30, "types": 2}) == {"ids": 30, "types": 2}


def test_the_demo_encoder_indexes_its_vocabulary(tmp_path: Path) -> None:
    write_demo_models(tmp_path)

    rows = model_lookup_rows(tmp_path / "demo-encoder" / "1" / "model.onnx")

    assert rows == {"input_ids": len(demo_vocab())}
    assert model_lookup_rows(tmp_path / "absent.onnx") == {}


def typed_config() -> ModelConfig:
    return ModelConfig.model_validate(
        {
            "name": "typed",
            "inputs": [
                {"name": "input_ids", "dtype": "int64", "shape": [-1, -1]},
                {"name": "token_type_ids", "dtype": "int64", "shape": [-1, -1]},
                {"name": "bucket", "dtype": "int32", "shape": [-1]},
            ],
            "outputs": [{"name": "y", "dtype": "float32", "shape": [-1, 4]}],
            "tokenizer": {
                "file": "tokenizer.json",
                "max_length": 16,
                "input_ids": "input_ids",
                "attention_mask": None,
                "token_type_ids": "token_type_ids",
            },
        }
    )


def typed_request(types: list[int], bucket: int) -> InferenceRequest:
    shape = [1, len(types)]
    inputs: dict[str, Any] = {
        "input_ids": {"dtype": "int64", "shape": shape, "data": [[5] * len(types)]},
        "token_type_ids": {"dtype": "int64", "shape": shape, "data": [types]},
        "bucket": {"dtype": "int32", "shape": [1], "data": [bucket]},
    }
    return InferenceRequest.model_validate(
        {"request_id": "r", "model": "typed", "inputs": inputs, "reply_to": "inferbus.results"}
    )


LIMITS = {"input_ids": 100, "token_type_ids": 2, "bucket": 10}


@pytest.mark.parametrize(
    ("types", "bucket", "message"),
    [
        pytest.param(
            [0, 2], 0, r"'token_type_ids' holds 2; .*table of 2 \(0-1\)", id="type-past-table"
        ),
        pytest.param([0, 1], 10, r"'bucket' holds 10; .*table of 10 \(0-9\)", id="row-past-end"),
        pytest.param([0, 1], -11, r"'bucket' holds -11; .*table of 10", id="below-minus-rows"),
    ],
)
def test_values_past_a_table_are_refused_with_its_size(
    types: list[int], bucket: int, message: str
) -> None:
    with pytest.raises(InvalidInput, match=message):
        validate_inputs(
            typed_request(types, bucket),
            typed_config(),
            max_tensor_bytes=1 << 20,
            max_samples=4,
            index_limits=LIMITS,
        )


@pytest.mark.parametrize(
    ("types", "bucket"),
    [
        pytest.param([0, 1], 9, id="last-rows"),
        pytest.param([0, 0], -10, id="onnx-counts-back-from-the-end"),
    ],
)
def test_values_within_the_tables_pass(types: list[int], bucket: int) -> None:
    arrays, _, samples = validate_inputs(
        typed_request(types, bucket),
        typed_config(),
        max_tensor_bytes=1 << 20,
        max_samples=4,
        index_limits=LIMITS,
    )

    assert samples == 1 and int(arrays["bucket"][0]) == bucket


def test_the_worker_checks_the_demo_encoders_ids_against_vocabulary_and_table(
    tmp_path: Path,
) -> None:
    write_demo_models(tmp_path)
    version = ModelRepository(tmp_path).resolve("demo-encoder", None)

    tokenize, limits = input_rules_for(version)

    assert tokenize is not None
    assert limits == {"input_ids": len(demo_vocab())}


def write_typed_model(root: Path) -> ModelRepository:
    """`typed`: word and token-type embeddings (rows: the demo vocabulary, 2), mean-pooled;
    declared as a tokenizer model with token types, as a BERT export is."""
    write_demo_models(root)
    shutil.move(root / "demo-encoder" / "tokenizer.json", root / "tokenizer.json")
    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array(rng.random((len(demo_vocab()), 4), dtype=np.float32), "word"),
        numpy_helper.from_array(rng.random((2, 4), dtype=np.float32), "types"),
        numpy_helper.from_array(np.array([1], dtype=np.int64), "axes"),
    ]
    nodes = [
        helper.make_node("Gather", ["word", "input_ids"], ["a"]),
        helper.make_node("Gather", ["types", "token_type_ids"], ["b"]),
        helper.make_node("Add", ["a", "b"], ["c"]),
        helper.make_node("ReduceMean", ["c", "axes"], ["y"], keepdims=0),
    ]
    inputs = [
        helper.make_tensor_value_info(name, TensorProto.INT64, ["N", "S"])
        for name in ("input_ids", "token_type_ids")
    ]
    output = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
    model = helper.make_model(
        helper.make_graph(nodes, "typed", inputs, [output], initializer=weights),
        opset_imports=[helper.make_opsetid("", 18)],
    )
    model.ir_version = 9
    folder = root / "typed"
    (folder / "1").mkdir(parents=True)
    onnx.save(model, str(folder / "1" / "model.onnx"))
    shutil.move(root / "tokenizer.json", folder / "tokenizer.json")
    config = {
        "name": "typed",
        "inputs": [
            {"name": name, "dtype": "int64", "shape": [-1, -1]}
            for name in ("input_ids", "token_type_ids")
        ],
        "outputs": [{"name": "y", "dtype": "float32", "shape": [-1, 4]}],
        "tokenizer": {
            "file": "tokenizer.json",
            "max_length": 64,
            "input_ids": "input_ids",
            "attention_mask": None,
            "token_type_ids": "token_type_ids",
        },
        "batching": {"max_batch_size": 8, "sequence_input": "input_ids"},
        "engine": {"kind": "onnxruntime", "providers": ["cpu"]},
    }
    (folder / "model.yaml").write_text(yaml.safe_dump(config))
    return ModelRepository(root)


async def noop() -> None:
    return None


async def test_a_model_with_token_types_warms_up_and_refuses_a_type_past_its_table(
    tmp_path: Path,
) -> None:
    """Warm-up fed token types 1..999 to a table of 2: the worker exited and restarted for
    ever. Now it warms with type 0, and a request's type 2 is refused before the engine."""
    host = EngineHost(write_typed_model(tmp_path), "typed")
    try:
        await host.load(on_warming=noop)
        assert host.index_limits == {"input_ids": len(demo_vocab()), "token_type_ids": 2}
        assert host.version is not None
        ids = {"dtype": "int64", "shape": [1, 3], "data": [[5, 6, 7]]}
        request = InferenceRequest.model_validate(
            {
                "request_id": "r",
                "model": "typed",
                "inputs": {
                    "input_ids": ids,
                    "token_type_ids": {**ids, "data": [[0, 1, 2]]},
                },
                "reply_to": "inferbus.results",
            }
        )
        with pytest.raises(InvalidInput, match=r"'token_type_ids' holds 2; .*table of 2"):
            validate_inputs(
                request,
                host.version.config,
                max_tensor_bytes=1 << 20,
                max_samples=8,
                index_limits=host.index_limits,
            )
    finally:
        await host.close()


def test_sample_batches_give_token_type_0_and_stay_inside_small_tables(tmp_path: Path) -> None:
    config = write_typed_model(tmp_path).resolve("typed", None).config

    batch = sample_batch(config, 4, 16, index_limits={"input_ids": 3})

    assert not batch["token_type_ids"].any()
    assert set(np.unique(batch["input_ids"])) <= {1, 2}
    assert sample_batch(config, 4, 16, index_limits={"input_ids": 1})["input_ids"].max() == 0


def test_a_model_without_integer_inputs_is_not_read_for_lookups(tmp_path: Path) -> None:
    """Nothing of a float-only model can index a table: its graph is not parsed (0.2 s of a
    worker's start for a MiniLM-sized file), so even unreadable bytes go unread here."""
    write_demo_models(tmp_path)
    version = ModelRepository(tmp_path).resolve("demo-mlp", None)
    version.model_file.write_bytes(b"not a protobuf")

    assert input_rules_for(version) == (None, {})

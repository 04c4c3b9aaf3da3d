"""A token-level output comes back as long as the request's own input, whatever it was
batched with: a real ONNX model, ingest and a worker on a real broker."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import onnx
import pytest
import pytest_asyncio
from onnx import TensorProto, helper

from infra.models.config import ModelConfig
from services.client import InferenceClient
from services.worker.settings import WorkerSettings
from tests.integration.stack import serving

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]
MODEL = "token-echo"


def token_echo() -> onnx.ModelProto:
    """`per_token` float32 [N,S] = input_ids × attention_mask; `length` [N,1] = S."""
    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["N", "S"])
    mask = helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["N", "S"])
    per_token = helper.make_tensor_value_info("per_token", TensorProto.FLOAT, ["N", "S"])
    length = helper.make_tensor_value_info("length", TensorProto.FLOAT, ["N", 1])
    nodes = [
        helper.make_node("Mul", ["input_ids", "attention_mask"], ["masked"]),
        helper.make_node("Cast", ["masked"], ["per_token"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["attention_mask"], ["mask_f"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["mask_f", "zero"], ["zeros"]),
        helper.make_node("Add", ["zeros", "one"], ["ones"]),
        helper.make_node("ReduceSum", ["ones", "axis1"], ["length"], keepdims=1),
    ]
    consts = [
        helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0]),
        helper.make_tensor("one", TensorProto.FLOAT, [], [1.0]),
        helper.make_tensor("axis1", TensorProto.INT64, [1], [1]),
    ]
    graph = helper.make_graph(nodes, MODEL, [ids, mask], [per_token, length], consts)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def write_repository(root: Path) -> None:
    folder = root / MODEL
    (folder / "1").mkdir(parents=True)
    onnx.save(token_echo(), str(folder / "1" / "model.onnx"))
    ModelConfig.model_validate(
        {
            "name": MODEL,
            "inputs": [
                {"name": "input_ids", "dtype": "int64", "shape": [-1, -1]},
                {"name": "attention_mask", "dtype": "int64", "shape": [-1, -1]},
            ],
            "outputs": [
                {"name": "per_token", "dtype": "float32", "shape": [-1, -1]},
                {"name": "length", "dtype": "float32", "shape": [-1, 1]},
            ],
            "batching": {
                "max_batch_size": 8,
                "max_queue_delay_ms": 50,
                "sequence_input": "input_ids",
                "length_buckets": [8, 16],
            },
            "engine": {"kind": "onnxruntime", "providers": ["cpu"]},
        }
    ).dump(folder / "model.yaml")


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def bootstrap(broker: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    models = tmp_path_factory.mktemp("repo")
    write_repository(models)
    async with serving(broker, models, [WorkerSettings(model=MODEL, models_dir=models)]):
        yield broker


async def test_each_request_gets_its_own_length_back(bootstrap: str) -> None:
    """Regression: the worker returned the padded batch's length (16 rows for 3 tokens
    beside 10, 8 for 5 tokens alone); the engine's own view of the batch proves it ran
    padded (`length`)."""
    lengths = [3, 10, 5, 16]
    async with InferenceClient(bootstrap) as client:
        results = await asyncio.gather(
            *(
                client.infer(
                    client.build_request(
                        MODEL,
                        {
                            "input_ids": np.full((1, n), n, dtype=np.int64),
                            "attention_mask": np.ones((1, n), dtype=np.int64),
                        },
                    ),
                    timeout_s=60,
                )
                for n in lengths
            )
        )
    for n, result in zip(lengths, results, strict=True):
        assert result.status == "ok", result.error
        np.testing.assert_array_equal(result.output("per_token"), np.full((1, n), float(n)))
        assert result.output("length")[0, 0] >= n  # the batch it ran in: padded to a bucket

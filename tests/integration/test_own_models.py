"""Your own ONNX models through the bus, added with `models add onnx`: a graph with a fixed
batch of 1 and a constant output beside its batched one, eight concurrent requests batched
together on a real broker, each answered its own rows."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import numpy as np
import onnx
import pytest
import pytest_asyncio
from onnx import TensorProto, helper, numpy_helper

from services.client import InferenceClient
from services.models.own import add_onnx
from services.worker.settings import WorkerSettings
from tests.integration.stack import serving

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]
MODEL = "own-fixed"
W = np.arange(64, dtype=np.float32).reshape(16, 4) / 64


def fixed_batch_with_constant() -> onnx.ModelProto:
    """`y` [1, 4] = x [1, 16] @ W, beside a constant `c` [3], as exporters write it."""
    constant = numpy_helper.from_array(np.ones(3, np.float32))
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["input_1:0", "W"], ["y"]),
            helper.make_node("Constant", [], ["c"], value=constant),
        ],
        MODEL,
        [helper.make_tensor_value_info("input_1:0", TensorProto.FLOAT, [1, 16])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4]),
            helper.make_tensor_value_info("c", TensorProto.FLOAT, [3]),
        ],
        [numpy_helper.from_array(W, "W")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def bootstrap(broker: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    root = tmp_path_factory.mktemp("own")
    onnx.save(fixed_batch_with_constant(), str(root / "exported.onnx"))
    added = add_onnx(root / "repo", root / "exported.onnx", MODEL, max_batch_size=8)
    assert [spec.name for spec in added.version.config.outputs] == ["y"]
    models = root / "repo"
    async with serving(broker, models, [WorkerSettings(model=MODEL, models_dir=models)]):
        yield broker


async def test_concurrent_requests_each_get_their_own_rows(bootstrap: str) -> None:
    """Regression: a fixed batch of 1 failed every batch of 2+ in the engine (each was
    retried down to single requests), and the constant output failed every request as
    `internal_error`."""
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((1, 16)).astype(np.float32) for _ in range(8)]
    async with InferenceClient(bootstrap) as client:
        results = await asyncio.gather(
            *(client.infer(client.build_request(MODEL, {"input_1:0": x}), timeout_s=60) for x in xs)
        )
    for x, result in zip(xs, results, strict=True):
        assert result.status == "ok", result.error
        assert set(result.outputs) == {"y"}
        np.testing.assert_allclose(result.output("y"), x @ W, rtol=1e-5)
    assert max(result.batch_size or 0 for result in results) > 1  # they rode together

"""A version whose inputs differ from model.yaml's is refused while model.yaml says
otherwise, and loaded once model.yaml is edited to match (a real ONNX Runtime engine)."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from infra.models.config import ModelConfig
from infra.models.repository import ModelRepository
from schemas.errors import InferbusError
from services.worker.engine_host import EngineHost


def _graph(inputs: list[str]) -> onnx.ModelProto:
    """y = the sum of the named float32 [N, 4] inputs."""
    graph = helper.make_graph(
        [helper.make_node("Sum", inputs, ["y"])],
        "sum",
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, ["N", 4]) for name in inputs],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _declare(root: Path, inputs: list[str]) -> None:
    ModelConfig.model_validate(
        {
            "name": "m",
            "inputs": [{"name": name, "dtype": "float32", "shape": [-1, 4]} for name in inputs],
            "outputs": [{"name": "y", "dtype": "float32", "shape": [-1, 4]}],
            "engine": {"providers": ["cpu"]},
        }
    ).dump(root / "m" / "model.yaml")


def _version(root: Path, version: str, inputs: list[str]) -> None:
    staging = root / "m" / f".{version}"
    staging.mkdir(parents=True)
    onnx.save(_graph(inputs), str(staging / "model.onnx"))
    shutil.move(staging, root / "m" / version)


async def test_a_refused_version_loads_once_model_yaml_declares_its_inputs(
    tmp_path: Path,
) -> None:
    """Regression: version 2 (adds input 'z') was refused for good, so after model.yaml
    declared 'z' the worker kept serving version 1, which cannot take 'z': every request
    was refused, by ingest (no 'z') or by the worker (unknown 'z'), until a restart."""
    _version(tmp_path, "1", ["x"])
    _declare(tmp_path, ["x"])
    host = EngineHost(ModelRepository(tmp_path), "m")

    switched = asyncio.Event()

    async def noop() -> None:
        return None

    async def on_switched() -> None:
        switched.set()

    await host.load(on_warming=noop)
    loop = asyncio.create_task(host.reload_loop(0.02, on_switched))
    try:
        _version(tmp_path, "2", ["x", "z"])
        await asyncio.sleep(0.3)  # several rounds: refused, version 1 serves
        assert host.version is not None and host.version.version == "1"
        assert not switched.is_set()
        _declare(tmp_path, ["x", "z"])
        await asyncio.wait_for(switched.wait(), 10)
        assert host.version.version == "2"
        ones = np.ones((1, 4), dtype=np.float32)
        ran = await host.run([{"x": ones, "z": ones}], [1], None)
        assert ran.outcomes[0].outputs is not None
        np.testing.assert_array_equal(ran.outcomes[0].outputs["y"], ones * 2)
    finally:
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)
        await host.close()


async def test_a_worker_starting_beside_a_refused_version_serves_the_one_before(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Regression: with a version 2 whose graph model.yaml does not describe, running
    workers kept serving 1, but one started then (a scale-out, a restart) failed on 2 and
    restarted for ever."""
    _version(tmp_path, "1", ["x"])
    _version(tmp_path, "2", ["x", "z"])
    _declare(tmp_path, ["x"])
    host = EngineHost(ModelRepository(tmp_path), "m")

    async def noop() -> None:
        return None

    try:
        await host.load(on_warming=noop)
        assert host.version is not None and host.version.version == "1"
        assert "event=version_refused model=m version=2" in caplog.text
        assert "event=serving_older_version model=m version=1 newest=2" in caplog.text
    finally:
        await host.close()


async def test_a_pinned_version_that_cannot_load_is_not_replaced(tmp_path: Path) -> None:
    _version(tmp_path, "1", ["x"])
    _version(tmp_path, "2", ["x", "z"])
    _declare(tmp_path, ["x"])
    host = EngineHost(ModelRepository(tmp_path), "m", pinned_version="2")

    async def noop() -> None:
        return None

    with pytest.raises(InferbusError, match="not declared"):
        await host.load(on_warming=noop)
    await host.close()

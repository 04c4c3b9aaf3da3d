"""GPU engines against the CPU reference on demo-encoder; each skips without its backend."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
import yaml

from infra.models.repository import ModelRepository, ModelVersion
from services.models.demo import ENCODER, IR_VERSION
from services.worker.engines.onnx_runtime import OnnxRuntimeEngine
from services.worker.engines.shapes import sample_batch

pytestmark = pytest.mark.gpu


def provider_problem(name: str) -> str | None:
    """Why the provider cannot run a session here; None when one really runs on it.

    onnxruntime-gpu lists the TensorRT provider even when libnvinfer is missing, then
    quietly runs the session on the next provider: listed is not usable. The probe model
    carries the demo models' IR version: one stamped with the installed onnx's newest IR
    is refused by an older onnxruntime, which read as "no GPU" on a GPU host.
    """
    if name not in ort.get_available_providers():
        return f"{name} is not among onnxruntime's providers (no onnxruntime-gpu?)"
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "probe",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = IR_VERSION
    options = ort.SessionOptions()
    options.log_severity_level = 4
    try:
        session = ort.InferenceSession(
            model.SerializeToString(), sess_options=options, providers=[name]
        )
    except Exception as exc:  # the provider's libraries are missing or broken: it cannot start
        return f"{name} cannot start a session: {str(exc)[:200]}"
    ran_on = session.get_providers()[0]
    return None if ran_on == name else f"{name} is listed, but a session ran on {ran_on}"


CUDA_PROBLEM = provider_problem("CUDAExecutionProvider")
TRT_PROBLEM = provider_problem("TensorrtExecutionProvider")
needs_cuda_ep = pytest.mark.skipif(
    CUDA_PROBLEM is not None, reason=f"onnxruntime's CUDA provider: {CUDA_PROBLEM}"
)
needs_trt_ep = pytest.mark.skipif(
    TRT_PROBLEM is not None, reason=f"onnxruntime's TensorRT provider: {TRT_PROBLEM}"
)
needs_tensorrt = pytest.mark.skipif(
    importlib.util.find_spec("tensorrt") is None or importlib.util.find_spec("cuda") is None,
    reason="tensorrt / cuda-python not installed (pip install -e '.[gpu]')",
)


def _model(demo_models: Path, tmp_path: Path, engine: dict[str, Any]) -> ModelVersion:
    target = tmp_path / "models" / ENCODER
    shutil.copytree(demo_models / ENCODER, target)
    raw = yaml.safe_load((target / "model.yaml").read_text())
    raw["engine"].update({"engine_cache_dir": str(tmp_path / "cache"), **engine})
    (target / "model.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    return ModelRepository(tmp_path / "models").resolve(ENCODER)


def _reference(model: ModelVersion, feed: dict[str, np.ndarray]) -> np.ndarray:
    session = ort.InferenceSession(str(model.model_file), providers=["CPUExecutionProvider"])
    return session.run(["embedding"], feed)[0]


@pytest.mark.parametrize("seq", [32, 128, 512])
@needs_cuda_ep
def test_cuda_ep_matches_cpu_with_iobinding(demo_models: Path, tmp_path: Path, seq: int) -> None:
    model = _model(demo_models, tmp_path, {"providers": ["cuda", "cpu"]})
    engine = OnnxRuntimeEngine(model)
    engine.load()
    assert engine.info.provider == "CUDAExecutionProvider"
    feed = sample_batch(model.config, 8, seq, seed=seq)
    got = engine.infer(feed)["embedding"]
    np.testing.assert_allclose(got, _reference(model, feed), atol=2e-3, rtol=1e-3)
    engine.unload()


@needs_trt_ep
def test_tensorrt_ep_matches_cpu_and_caches(demo_models: Path, tmp_path: Path) -> None:
    model = _model(demo_models, tmp_path, {"providers": ["tensorrt", "cuda", "cpu"]})
    engine = OnnxRuntimeEngine(model)
    engine.load()
    assert engine.info.provider == "TensorrtExecutionProvider"
    for seq in (32, 512):
        feed = sample_batch(model.config, 32, seq, seed=seq)
        got = engine.infer(feed)["embedding"]
        np.testing.assert_allclose(got, _reference(model, feed), atol=1e-2, rtol=1e-2)
    assert any((tmp_path / "cache" / "ort-trt").rglob("*.engine"))
    engine.unload()


@needs_tensorrt
def test_native_tensorrt_builds_caches_and_matches(demo_models: Path, tmp_path: Path) -> None:
    from services.worker.engines.tensorrt_native import TensorRTEngine

    model = _model(demo_models, tmp_path, {"kind": "tensorrt"})
    first = TensorRTEngine(model)
    first.load()
    assert not first.cache_hit
    assert first.cache_file is not None and first.cache_file.is_file()
    for batch, seq in [(1, 32), (32, 32), (4, 512)]:
        feed = sample_batch(model.config, batch, seq, seed=batch + seq)
        got = first.infer(feed)["embedding"]
        assert got.shape == (batch, 256)
        np.testing.assert_allclose(got, _reference(model, feed), atol=1e-2, rtol=1e-2)
    first.unload()

    again = TensorRTEngine(model)
    again.load()
    assert again.cache_hit
    assert again.cache_file == first.cache_file
    again.unload()


@needs_tensorrt
def test_native_tensorrt_fp16(demo_models: Path, tmp_path: Path) -> None:
    from services.worker.engines.tensorrt_native import TensorRTEngine

    model = _model(demo_models, tmp_path, {"kind": "tensorrt", "fp16": True})
    engine = TensorRTEngine(model)
    engine.load()
    feed = sample_batch(model.config, 8, 64)
    got = engine.infer(feed)["embedding"]
    np.testing.assert_allclose(got, _reference(model, feed), atol=5e-2, rtol=5e-2)
    engine.unload()


@needs_tensorrt
@pytest.mark.parametrize("name", ["fixed-batch-1", "fixed-batch-4"])
def test_native_tensorrt_runs_a_fixed_batch_graph_in_chunks(tmp_path: Path, name: str) -> None:
    """A graph whose batch is fixed ([1, 4], [4, 4]) runs a batch of 5 that many samples at
    a time, each sample's rows as the graph gives them alone."""
    from services.worker.engines.tensorrt_native import TensorRTEngine
    from tests.unit.engines.test_own_graphs import CASES, alone_answer, write_version

    version = write_version(tmp_path / "models", name, CASES[name])
    raw = yaml.safe_load((tmp_path / "models" / name / "model.yaml").read_text())
    raw["engine"].update({"kind": "tensorrt", "engine_cache_dir": str(tmp_path / "cache")})
    (tmp_path / "models" / name / "model.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    model = ModelRepository(tmp_path / "models").resolve(name)
    engine = TensorRTEngine(model)
    engine.load()
    requests = [sample_batch(model.config, 1, seed=seed) for seed in range(5)]
    got = engine.infer({k: np.concatenate([r[k] for r in requests]) for k in requests[0]})
    for i, request in enumerate(requests):
        for output, value in alone_answer(version, request).items():
            np.testing.assert_allclose(got[output][i : i + 1], value, rtol=1e-3, atol=1e-3)
    engine.unload()

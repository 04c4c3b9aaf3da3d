"""ONNX Runtime engine: same numbers as a direct session, provider fallback, bad model files."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from infra.models.repository import ModelRepository, ModelVersion
from schemas.errors import EngineError, InvalidInput
from services.models.demo import ENCODER, MLP
from services.worker.engines import create_engine
from services.worker.engines.onnx_runtime import OnnxRuntimeEngine, provider_options
from services.worker.engines.shapes import sample_batch, warmup_batches


def _direct(model: ModelVersion, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(str(model.model_file), providers=["CPUExecutionProvider"])
    return session.run(None, feed)


@pytest.mark.parametrize("name", [MLP, ENCODER])
@pytest.mark.parametrize("io_binding", [False, True], ids=["run", "iobinding"])
def test_outputs_equal_direct_session(demo_models: Path, name: str, io_binding: bool) -> None:
    model = ModelRepository(demo_models).resolve(name)
    engine = OnnxRuntimeEngine(model, io_binding=io_binding)
    engine.load()
    feed = sample_batch(model.config, 4, 32, seed=7)
    got = engine.infer(feed)
    (want,) = _direct(model, feed)
    (out_name,) = got
    np.testing.assert_array_equal(got[out_name], want)
    engine.unload()


def test_factory_picks_onnxruntime_and_warmup_covers_buckets(demo_models: Path) -> None:
    model = ModelRepository(demo_models).resolve(ENCODER)
    engine = create_engine(model)
    assert isinstance(engine, OnnxRuntimeEngine)
    engine.load()
    batches = warmup_batches(model.config)
    assert sorted({b["input_ids"].shape[1] for b in batches}) == [32, 64, 128, 256, 512]
    engine.warmup([b for b in batches if b["input_ids"].shape[0] == 1])


def test_fallback_to_cpu_logs_one_line(
    edited_model: Callable[..., ModelVersion], caplog: pytest.LogCaptureFixture
) -> None:
    model = edited_model(MLP, {"providers": ["tensorrt", "cuda", "cpu"]})
    engine = OnnxRuntimeEngine(model)
    with caplog.at_level(logging.INFO, logger="services.worker.engines.onnx_runtime"):
        engine.load()
    lines = [r.getMessage() for r in caplog.records if "provider_fallback" in r.getMessage()]
    assert len(lines) == 1
    assert "TensorrtExecutionProvider(not in onnxruntime)" in lines[0]
    assert "CUDAExecutionProvider(not in onnxruntime)" in lines[0]
    assert lines[0].endswith("running=CPUExecutionProvider")
    assert engine.info.provider == "CPUExecutionProvider"
    assert engine.info.label == "onnxruntime:CPUExecutionProvider"
    assert not engine.info.simulated


def test_cpu_first_logs_nothing(
    edited_model: Callable[..., ModelVersion], caplog: pytest.LogCaptureFixture
) -> None:
    engine = OnnxRuntimeEngine(edited_model(MLP, {"providers": ["cpu"]}))
    with caplog.at_level(logging.INFO):
        engine.load()
    assert not [r for r in caplog.records if "provider_fallback" in r.getMessage()]


def test_no_configured_provider_available(edited_model: Callable[..., ModelVersion]) -> None:
    engine = OnnxRuntimeEngine(edited_model(MLP, {"providers": ["tensorrt", "cuda"]}))
    with pytest.raises(EngineError, match="none of the configured providers"):
        engine.load()


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (b"this is not a protobuf", "cannot load"),
        (b"\x08\x07\x12\x04junk" * 3, "cannot load"),
    ],
    ids=["garbage", "truncated-proto"],
)
def test_corrupt_model_raises_engine_error(
    edited_model: Callable[..., ModelVersion], content: bytes, match: str
) -> None:
    model = edited_model(MLP)
    model.model_file.write_bytes(content)
    with pytest.raises(EngineError, match=match):
        OnnxRuntimeEngine(model).load()


def test_missing_model_file(edited_model: Callable[..., ModelVersion]) -> None:
    model = edited_model(MLP)
    model.model_file.unlink()
    with pytest.raises(EngineError, match="does not exist"):
        OnnxRuntimeEngine(model).load()


def test_config_graph_mismatch_is_refused(edited_model: Callable[..., ModelVersion]) -> None:
    model = edited_model(MLP, inputs=[{"name": "x", "dtype": "float64", "shape": [-1, 16]}])
    with pytest.raises(EngineError, match=r"model\.yaml says float64"):
        OnnxRuntimeEngine(model).load()


@pytest.mark.parametrize(
    ("feed", "match"),
    [
        ({"x": np.zeros((2, 16), np.float64)}, "must be float32"),
        ({"x": np.zeros((2, 15), np.float32)}, "has shape"),
        ({}, "missing input"),
        ({"x": np.zeros((1, 16), np.float32), "z": np.zeros(1)}, "unknown input"),
    ],
    ids=["dtype", "shape", "missing", "unknown"],
)
def test_bad_batch_is_invalid_input(demo_models: Path, feed: dict, match: str) -> None:
    engine = OnnxRuntimeEngine(ModelRepository(demo_models).resolve(MLP))
    engine.load()
    with pytest.raises(InvalidInput, match=match):
        engine.infer(feed)


def test_provider_options_from_config(edited_model: Callable[..., ModelVersion]) -> None:
    model = edited_model(
        ENCODER,
        {"fp16": True, "workspace_mb": 512, "provider_options": {"cuda": {"gpu_mem_limit": 1024}}},
    )
    trt = provider_options(model, "tensorrt")
    assert trt["trt_fp16_enable"] == "True"
    assert trt["trt_engine_cache_enable"] == "True"
    assert trt["trt_engine_cache_path"].endswith("ort-trt/demo-encoder-1")
    assert trt["trt_profile_min_shapes"] == "input_ids:1x1,attention_mask:1x1"
    assert trt["trt_profile_opt_shapes"] == "input_ids:32x32,attention_mask:32x32"
    assert trt["trt_profile_max_shapes"] == "input_ids:32x512,attention_mask:32x512"
    assert trt["trt_max_workspace_size"] == str(512 * 1024 * 1024)
    cuda = provider_options(model, "cuda")
    assert cuda["device_id"] == "0"
    assert cuda["gpu_mem_limit"] == "1024"
    assert provider_options(model, "cpu") == {}


def _rss_mb() -> float:
    status = Path("/proc/self/status").read_text()
    return int(status.split("VmRSS:")[1].split()[0]) / 1024


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
def test_warmup_gives_the_arena_back(demo_models: Path) -> None:
    """The 32 x 512 warmup batch grew the CPU arena to ~520 MB, kept while a worker served
    short requests (a newcomer saw 720 MB per demo-encoder worker); warmup now shrinks it."""
    model = ModelRepository(demo_models).resolve(ENCODER)
    engine = OnnxRuntimeEngine(model)
    engine.load()
    before = _rss_mb()
    engine.warmup(warmup_batches(model.config))
    grown = _rss_mb() - before
    engine.unload()
    assert grown < 200, f"RSS grew {grown:.0f} MB over warmup"

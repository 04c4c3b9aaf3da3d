"""Pick the engine class a model version's `engine.kind` names."""

from __future__ import annotations

from infra.models.repository import ModelVersion
from services.worker.engines.base import Engine


def create_engine(model: ModelVersion) -> Engine:
    """A new, unloaded engine for `model`; call `load()` (in a thread) before `infer()`."""
    kind = model.config.engine.kind
    if kind == "sim":
        from services.worker.engines.sim import SimEngine

        return SimEngine(model)
    if kind == "tensorrt":
        from services.worker.engines.tensorrt_native import TensorRTEngine

        return TensorRTEngine(model)
    from services.worker.engines.onnx_runtime import OnnxRuntimeEngine

    return OnnxRuntimeEngine(model)

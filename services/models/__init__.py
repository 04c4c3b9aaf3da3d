"""The model repository: `models/<name>/model.yaml` plus version folders with `model.onnx`."""

from services.models.config import (
    BatchingConfig,
    EngineConfig,
    ModelConfig,
    ModelConfigError,
    TensorSpec,
)
from services.models.repository import ModelRepository, ModelVersion

__all__ = [
    "BatchingConfig",
    "EngineConfig",
    "ModelConfig",
    "ModelConfigError",
    "ModelRepository",
    "ModelVersion",
    "TensorSpec",
]

"""The model repository: `models/<name>/model.yaml` plus version folders with `model.onnx`.

Below ingest, the worker and the scaler alike; demo models, calibration and `inferbus
models` live above it in `services.models`.
"""

from infra.models.config import (
    BatchingConfig,
    EngineConfig,
    ModelConfig,
    ModelConfigError,
    TensorSpec,
)
from infra.models.repository import ModelRepository, ModelVersion

__all__ = [
    "BatchingConfig",
    "EngineConfig",
    "ModelConfig",
    "ModelConfigError",
    "ModelRepository",
    "ModelVersion",
    "TensorSpec",
]

"""Event schemas of the inferbus wire format (v1)."""

from schemas.errors import (
    DeadlineExceeded,
    EngineError,
    InferbusError,
    InvalidInput,
    ModelNotFound,
    Overloaded,
    Unauthorized,
    Unparseable,
)
from schemas.request import InferenceRequest
from schemas.result import STATUSES, ErrorInfo, InferenceResult, Status, Timings
from schemas.tensors import DTYPES, Tensor, TensorDecodeError, TextInput
from schemas.topics import TIERS, Tier

__all__ = [
    "DTYPES",
    "STATUSES",
    "TIERS",
    "DeadlineExceeded",
    "EngineError",
    "ErrorInfo",
    "InferbusError",
    "InferenceRequest",
    "InferenceResult",
    "InvalidInput",
    "ModelNotFound",
    "Overloaded",
    "Status",
    "Tensor",
    "TensorDecodeError",
    "TextInput",
    "Tier",
    "Timings",
    "Unauthorized",
    "Unparseable",
]

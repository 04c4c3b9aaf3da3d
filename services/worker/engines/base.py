"""The engine contract every backend implements: load, warm up, infer a batch, unload."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from infra.models.repository import ModelVersion
from schemas.tensors import Arrays


@dataclass(frozen=True)
class EngineInfo:
    """What ran a batch: the backend, the provider that actually ran, and whether simulated."""

    backend: str
    provider: str
    simulated: bool = False

    @property
    def label(self) -> str:
        base = f"{self.backend}:{self.provider}"
        return f"{base} (simulated)" if self.simulated else base


class Engine(ABC):
    """One model version in one engine session. Methods are blocking; callers use a thread."""

    def __init__(self, model: ModelVersion) -> None:
        self.model = model

    @property
    @abstractmethod
    def info(self) -> EngineInfo:
        """Backend and provider; valid after `load()`."""

    @abstractmethod
    def load(self) -> None:
        """Build or load the session; raises EngineError with a clear message on failure."""

    def warmup(self, batches: list[Arrays]) -> None:
        """Run each sample batch once so the first real request pays no compile cost."""
        for batch in batches:
            self.infer(batch)

    @abstractmethod
    def infer(self, inputs: Mapping[str, np.ndarray[Any, Any]]) -> Arrays:
        """Run one batch (leading dimension = batch) and return outputs by name."""

    @abstractmethod
    def unload(self) -> None:
        """Free the session; idempotent."""

"""The engine contract every backend implements: load, warm up, infer a batch, unload."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from infra.models.repository import ModelVersion
from schemas.tensors import Arrays
from services.worker.engines.inputs import check_outputs


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
        """Run each sample batch once so the first real request pays no compile cost, and
        check that its outputs come back one row a sample (`check_outputs`)."""
        for batch in batches:
            check_outputs(self.model.config, _samples(batch), self.infer(batch))
        if not batches:
            return
        # Once more at twice the smallest batch: an output with no batch axis can match
        # one batch size by chance (a constant [1] at batch 1, a transposed [16, N] at 16),
        # never two. An exporter's output shapes cannot tell: it often writes the traced
        # batch (an output [1, 4] that runs as [N, 4]).
        smallest = min(batches, key=_samples)
        if 2 * _samples(smallest) <= self.model.config.batching.max_batch_size:
            doubled = {name: np.concatenate([array, array]) for name, array in smallest.items()}
            check_outputs(self.model.config, 2 * _samples(smallest), self.infer(doubled))

    @abstractmethod
    def infer(self, inputs: Mapping[str, np.ndarray[Any, Any]]) -> Arrays:
        """Run one batch (leading dimension = batch) and return outputs by name."""

    @abstractmethod
    def unload(self) -> None:
        """Free the session; idempotent."""


def _samples(batch: Arrays) -> int:
    return len(next(iter(batch.values())))

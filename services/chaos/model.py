"""The model chaos runs serve: a simulated engine whose capacity is known in advance."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from infra.models.config import (
    BatchingConfig,
    EngineConfig,
    ModelConfig,
    ReplicaBounds,
    SimConfig,
    TensorSpec,
    WarmupConfig,
)

MODEL = "chaos-sim"
FEATURES = 16


@dataclass(frozen=True)
class SimModel:
    """Latency model of the served engine: a batch of n takes `a_ms + b_ms * n`."""

    max_batch_size: int = 8
    a_ms: float = 20.0
    b_ms: float = 2.5
    max_queue_delay_ms: float = 5.0
    max_replicas: int = 3
    """The scaler's ceiling: a 2-core machine runs only a few workers."""

    @property
    def capacity_rps(self) -> float:
        """Requests per second one worker serves with full batches (before any overhead)."""
        full_batch_ms = self.a_ms + self.b_ms * self.max_batch_size
        return self.max_batch_size * 1000.0 / full_batch_ms

    def config(self) -> ModelConfig:
        return ModelConfig(
            name=MODEL,
            description="Chaos harness: a simulated engine with a known capacity.",
            inputs=[TensorSpec(name="x", dtype="float32", shape=[-1, FEATURES])],
            outputs=[TensorSpec(name="y", dtype="float32", shape=[-1, 4])],
            batching=BatchingConfig(
                max_batch_size=self.max_batch_size, max_queue_delay_ms=self.max_queue_delay_ms
            ),
            engine=EngineConfig(
                kind="sim", sim=SimConfig(a_ms=self.a_ms, b_ms=self.b_ms, per="sample")
            ),
            replicas=ReplicaBounds(min=1, max=self.max_replicas, warm=1),
            warmup=WarmupConfig(batch_sizes=[1]),
        )


def write_model(root: Path, model: SimModel) -> Path:
    """Write `root/chaos-sim` (model.yaml and an empty version folder); returns the root."""
    folder = root / MODEL
    (folder / "1").mkdir(parents=True, exist_ok=True)
    model.config().dump(folder / "model.yaml")
    return root

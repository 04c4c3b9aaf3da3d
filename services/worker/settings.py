"""Worker settings (env prefix `INFERBUS_WORKER_`)."""

from __future__ import annotations

from pathlib import Path

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from schemas.topics import Lane, Tier

STOP_AFTER_DRAIN_S = 10.0
"""Most seconds a stop waits on the broker after the drain (`drain_timeout_s`), all steps
together: with the broker up it takes well under one; with it away each step would wait
the Kafka client's 30 s request timeout, and a stop took minutes (docs/operations.md)."""
NOTICE_S = 2.0
"""Most seconds a stop waits for each registry notice (draining, gone) and the last
heartbeat: courtesies, which the lease (`lease_s`) stands in for."""
EXIT_S = 3.0
"""After its stop limit, the time a worker's process takes to exit (interpreter teardown)."""


def _default_tiers() -> list[Tier]:
    return ["interactive"]


class WorkerSettings(BaseSettings):
    """One worker process: one engine session, one consumer per served tier."""

    model_config = SettingsConfigDict(
        env_prefix="INFERBUS_WORKER_", extra="ignore", populate_by_name=True
    )

    model: str = Field(default="demo-mlp", min_length=1)
    """Model to serve."""
    tiers: list[Tier] = Field(default_factory=_default_tiers)
    """Tiers served, strict priority critical > interactive > batch."""
    lane: Lane = "stable"
    """Rollout lane: `canary` workers serve model.yaml's `rollout.canary` from the canary
    topics and groups; `stable` ones serve `rollout.stable` (the newest version without a
    rollout block)."""
    model_version: str | None = None
    """Pin a version (over the lane's); default: the lane's version, or without a rollout
    block the latest complete one, hot-reloaded when a newer appears."""
    models_dir: Path = Field(
        default=Path("models"),
        validation_alias=AliasChoices("INFERBUS_WORKER_MODELS_DIR", "INFERBUS_MODELS_DIR"),
    )
    """The model repository: `INFERBUS_WORKER_MODELS_DIR`, else the deployment's shared
    `INFERBUS_MODELS_DIR` (what every other command reads)."""
    instance_id: str | None = None
    """Stable id in the registry and telemetry; default: worker-<model>-<host>-<pid>."""
    max_in_hand: int = Field(default=256, gt=0)
    """Requests polled but not answered before polling pauses (backpressure)."""
    prefetch_batches: int = Field(default=2, ge=1)
    """Full batches of a tier kept queued in the worker besides those in the engine; the
    rest waits in Kafka. Polling for more only to queue them costs the broker a fetch
    every few milliseconds while the engine is behind, and the worker's queue is what a
    handover drains."""
    poll_max_records: int = Field(default=512, gt=0)
    """Most records per poll; the room left in hand (`max_in_hand`, `prefetch_batches`)
    usually caps a poll first."""
    starvation_ms: float = Field(default=1000.0, gt=0, allow_inf_nan=False)
    """A lower tier waits at most this long behind higher ones, milliseconds."""
    lease_s: float = Field(default=6.0, gt=0, allow_inf_nan=False)
    """Registry lease: a worker that dies hands its partitions over this long after."""
    max_publishes_in_flight: int = Field(default=4, gt=0)
    """Batches whose results are being published while the engine runs the next."""
    engine_queue_depth: int = Field(default=2, ge=1)
    """Batches in the engine's hands: one running plus full ones queued behind it."""
    heartbeat_interval_s: float = Field(default=2.0, gt=0, allow_inf_nan=False)
    """Telemetry heartbeat period, seconds."""
    reload_check_s: float = Field(default=2.0, gt=0, allow_inf_nan=False)
    """How often the repository is checked for a newer version, seconds."""
    publish_patience_s: float = Field(default=60.0, gt=0, allow_inf_nan=False)
    """How long results are retried while the broker is away or re-creating a topic,
    seconds; what still fails then goes to the DLQ as undeliverable."""
    drain_timeout_s: float = Field(default=30.0, gt=0, allow_inf_nan=False)
    """On SIGTERM, how long to finish in-hand work before leaving, seconds."""
    metrics_port: int = Field(default=0, ge=0, le=65535)
    """Prometheus /metrics port; 0 turns it off."""

    @property
    def stop_limit_s(self) -> float:
        """The most a stop takes after SIGTERM: the draining notice, the drain, then what
        waits on the broker. Whoever stops a worker waits this long before a second signal
        (which exits at once, leaving what was in hand uncommitted for the next owner)."""
        return NOTICE_S + self.drain_timeout_s + STOP_AFTER_DRAIN_S

    @property
    def stop_grace_s(self) -> float:
        """How long whoever stops a worker waits after SIGTERM before a second signal: its
        stop limit and its exit. Shorter, a scale-in cut a stop whose drain ran long (the
        local actuator waited 30 s of the 42 a default worker may take)."""
        return self.stop_limit_s + EXIT_S

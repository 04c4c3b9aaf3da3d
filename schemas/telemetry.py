"""Events on `inferbus.instances` (registry, compacted) and `inferbus.telemetry` (heartbeats)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from schemas.topics import Lane, Tier

InstanceState = Literal["loading", "warming", "ready", "draining", "gone"]
INSTANCE_STATES: tuple[InstanceState, ...] = ("loading", "warming", "ready", "draining", "gone")


class InstanceRecord(BaseModel):
    """One worker's registry entry, keyed by instance id; `gone` is its last word."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    schema_version: Literal[1] = 1
    instance_id: str
    model: str = Field(description="The model it serves; empty for an ingest instance.")
    tiers: list[Tier]
    group: str = Field(description="Consumer group of its first (highest) tier.")
    state: InstanceState
    model_version: str | None = None
    provider: str | None = None
    simulated: bool = False
    host: str | None = None
    pid: int | None = None
    started_at: datetime
    updated_at: datetime
    load_s: float | None = Field(default=None, description="Model load time, seconds.")
    warmup_s: float | None = Field(default=None, description="Warm-up time, seconds.")
    time_to_ready_s: float | None = Field(default=None, description="Process start to ready.")
    partitions: int | None = Field(
        default=None,
        description="Partitions assigned to it now, all its groups together; 0 while it has "
        "joined no group yet; None from workers that do not report it.",
    )
    service: str = Field(default="inferbus-worker", description="inferbus-worker, -ingest.")
    groups: list[str] = Field(
        default_factory=list,
        description="Every consumer group it serves (one per tier); empty: only `group`.",
    )
    owned: dict[str, list[int]] = Field(
        default_factory=dict,
        description="Partitions it consumes now, per topic. Another member takes one only "
        "after it is released here (or the lease ran out).",
    )
    ready_at: datetime | None = Field(
        default=None, description="When it became ready; the oldest consume first."
    )
    lease_s: float | None = Field(
        default=None,
        description="The record is refreshed well within this; past it without a refresh "
        "the instance counts as gone (its process died).",
    )
    standby: bool = Field(
        default=False, description="Loaded and warm, holding no partition by the scaler's word."
    )


class WorkerLoad(BaseModel):
    """A worker's recent load, over the heartbeat interval."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    busy_fraction: float = Field(ge=0, description="Share of wall time the engine was running.")
    batches: int = 0
    samples: int = 0
    mean_batch_size: float = 0.0
    queued: int = Field(default=0, description="Requests polled but not yet answered.")
    samples_per_s: float = 0.0
    window_s: float | None = Field(
        default=None,
        description="Seconds this load covers: the heartbeat interval, or less for the "
        "final heartbeat a stopping worker sends.",
    )
    results: dict[str, int] = Field(
        default_factory=dict,
        description="Terminal results the worker sent over the window, by status (the "
        "rollout verdict's error rates).",
    )


class Heartbeat(BaseModel):
    """Published to `inferbus.telemetry` every few seconds by every process with spans."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    schema_version: Literal[1] = 1
    instance_id: str
    service: str = Field(description="inferbus-ingest, inferbus-worker, ...")
    model: str | None = None
    tiers: list[Tier] = Field(default_factory=list)
    lane: Lane | None = Field(
        default=None, description="A worker's rollout lane; None: not a worker (or stable)."
    )
    model_version: str | None = Field(
        default=None, description="The version a worker served when it sent this."
    )
    at: datetime
    interval_s: float
    load: WorkerLoad | None = None
    histograms: list[dict[str, Any]] = Field(
        default_factory=list,
        description="Stage histograms: {model, tier, stage, ...serialized histogram}.",
    )

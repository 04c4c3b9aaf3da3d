"""Ingest service settings (env prefix `INFERBUS_INGEST_`)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class IngestSettings(BaseSettings):
    """How ingest validates, bounds and routes request events."""

    model_config = SettingsConfigDict(env_prefix="INFERBUS_INGEST_", extra="ignore")

    models_dir: Path = Path("models")
    """The model repository ingest checks requests against."""
    max_event_bytes: int = Field(default=1_048_576, gt=0)
    """Largest request event accepted, bytes; larger ones get `invalid_input`."""
    max_tensor_bytes: int = Field(default=4_194_304, gt=0)
    """Largest decoded input tensor, bytes."""
    max_samples_per_request: int = Field(default=64, gt=0)
    """Largest leading (batch) dimension of one request."""
    poll_max_records: int = Field(default=512, gt=0)
    """Most events handled per poll; a poll is routed and acked before its offsets commit."""
    polls_in_flight: int = Field(default=4, gt=0)
    """Polls being routed at once: the next poll goes on while the last one's acks are due."""
    shed_batch_after_ms: float = Field(default=2_000.0, gt=0)
    """Ingest is behind when an event waited this long for it, ms: batch-tier requests are
    then answered `rejected_overload` at once, so critical and interactive ones go first."""
    lease_s: float = Field(default=6.0, gt=0)
    """Registry lease: another ingest takes this one's partitions this long after it died."""
    publish_patience_s: float = Field(default=60.0, gt=0)
    """How long a poll's outcomes are retried while the broker is away or re-creating a
    topic, seconds, before the fallback (an error result, then the DLQ)."""
    keep_topics: bool = True
    """Re-create missing topics (a broker that lost its state); off where ACLs forbid it."""
    queue_refresh_ms: int = Field(default=500, gt=0)
    """How often tier queue depths are re-read for overload checks, milliseconds."""
    model_refresh_s: float = Field(default=5.0, gt=0)
    """How often the model repository is re-read, seconds."""
    metrics_port: int = 0
    """Prometheus /metrics port; 0 turns it off."""
    instance_id: str | None = None
    """Stable id for logs and telemetry; default: host-pid."""

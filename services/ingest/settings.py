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
    poll_max_records: int = Field(default=256, gt=0)
    """Most events handled per poll; all of a poll are routed before one commit."""
    poll_timeout_ms: int = Field(default=5, ge=0)
    """How long a poll waits for more events before routing what it has, milliseconds."""
    queue_refresh_ms: int = Field(default=500, gt=0)
    """How often tier queue depths are re-read for overload checks, milliseconds."""
    model_refresh_s: float = Field(default=5.0, gt=0)
    """How often the model repository is re-read, seconds."""
    metrics_port: int = 0
    """Prometheus /metrics port; 0 turns it off."""
    instance_id: str | None = None
    """Stable id for logs and telemetry; default: host-pid."""

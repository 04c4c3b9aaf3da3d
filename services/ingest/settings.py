"""Ingest service settings (env prefix `INFERBUS_INGEST_`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

from pydantic import AliasChoices, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from infra.json_unique import loads_unique_keys
from schemas.request import TENANT_MAX_CHARS
from schemas.topics import TIERS, Tier
from services.ingest.limits import NO_TENANT, TenantLimit, TenantLimiter


class IngestSettings(BaseSettings):
    """How ingest validates, bounds and routes request events."""

    model_config = SettingsConfigDict(
        env_prefix="INFERBUS_INGEST_", extra="ignore", populate_by_name=True
    )

    models_dir: Path = Field(
        default=Path("models"),
        validation_alias=AliasChoices("INFERBUS_INGEST_MODELS_DIR", "INFERBUS_MODELS_DIR"),
    )
    """The model repository ingest checks requests against: `INFERBUS_INGEST_MODELS_DIR`,
    else the deployment's shared `INFERBUS_MODELS_DIR` (what every other command reads)."""
    tiers: list[Tier] = Field(default_factory=lambda: list(TIERS), min_length=1)
    """Tiers this deployment runs workers for, JSON (`["interactive"]`): a request for
    another is answered `invalid_input` at once, since no worker would ever read it (a
    model's own `tiers` narrows it further). `inferbus up --tiers` sets it."""
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
    shed_batch_after_ms: float = Field(default=2_000.0, gt=0, allow_inf_nan=False)
    """Ingest is behind when an event waited this long for it, ms: batch-tier requests are
    then answered `rejected_overload` at once, so critical and interactive ones go first."""
    admit_wait_share: float = Field(default=0.75, gt=0, le=1, allow_inf_nan=False)
    """A request is admitted while the tier queue's predicted wait is at most this share of
    the time left before its deadline; over it, `rejected_overload` at once (an admitted
    request that expires in the queue is answered only when a worker reaches it)."""
    lease_s: float = Field(default=6.0, gt=0, allow_inf_nan=False)
    """Registry lease: another ingest takes this one's partitions this long after it died."""
    publish_patience_s: float = Field(default=60.0, gt=0, allow_inf_nan=False)
    """How long a poll's outcomes are retried while the broker is away or re-creating a
    topic, seconds, before the fallback (an error result, then the DLQ)."""
    keep_topics: bool = True
    """Re-create missing topics (a broker that lost its state); off where ACLs forbid it."""
    queue_refresh_ms: int = Field(default=500, gt=0)
    """How often tier queue depths are re-read for overload checks, milliseconds."""
    model_refresh_s: float = Field(default=5.0, gt=0, allow_inf_nan=False)
    """How often the model repository is re-read, seconds."""
    metrics_port: int = Field(default=0, ge=0, le=65535)
    """Prometheus /metrics port; 0 turns it off."""
    instance_id: str | None = None
    """Stable id for logs and telemetry; default: host-pid."""
    tenant_rate_rps: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    """Requests per second each tenant may send to this ingest instance (a token bucket);
    over it a request is answered `rejected_overload`. None: no default limit."""
    tenant_burst: int | None = Field(default=None, gt=0)
    """Requests a tenant may send at once (the bucket size); None: one second's worth."""
    tenant_limits: Annotated[dict[str, TenantLimit], NoDecode] = Field(default_factory=dict)
    """Per-tenant limits over the default, JSON: `{"team-a": 100}` (req/s) or
    `{"team-a": {"rate_rps": 100, "burst": 400}}`; `(none)` names requests without a tenant."""

    @field_validator("tenant_limits", mode="before")
    @classmethod
    def _json_naming_each_tenant_once(cls, value: Any) -> Any:
        # JSON lets a key repeat and the last one wins: a limit written twice would be
        # half ignored in silence.
        if not isinstance(value, str):
            return value
        try:
            return loads_unique_keys(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not valid JSON: {exc}") from None

    @field_validator("tenant_limits")
    @classmethod
    def _tenants_that_can_match(cls, limits: dict[str, TenantLimit]) -> dict[str, TenantLimit]:
        for tenant in limits:
            if not tenant:
                raise ValueError(
                    f"an empty tenant never matches: requests without one are named {NO_TENANT}"
                )
            if len(tenant) > TENANT_MAX_CHARS:
                raise ValueError(
                    f"tenant {tenant[:40]!r}… has {len(tenant)} characters and never matches: "
                    f"a request's tenant has at most {TENANT_MAX_CHARS}"
                )
        return limits

    @model_validator(mode="after")
    def _burst_needs_rate(self) -> IngestSettings:
        if self.tenant_burst is not None and self.tenant_rate_rps is None:
            raise ValueError(
                "INFERBUS_INGEST_TENANT_BURST is set without INFERBUS_INGEST_TENANT_RATE_RPS"
            )
        return self

    def tenant_limiter(self) -> TenantLimiter:
        """Fresh token buckets for these limits (one limiter per ingest instance)."""
        default = (
            TenantLimit(rate_rps=self.tenant_rate_rps, burst=self.tenant_burst)
            if self.tenant_rate_rps is not None
            else None
        )
        return TenantLimiter(default, self.tenant_limits)

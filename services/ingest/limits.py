"""Per-tenant rate limits at ingest: one token bucket per tenant, on a clock the caller gives."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field, model_validator

NO_TENANT = "(none)"
"""The bucket that requests naming no tenant share."""


class TenantLimit(BaseModel):
    """One tenant's rate and burst; `{"team-a": 100}` is shorthand for a rate alone."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rate_rps: float = Field(gt=0)
    """Requests per second the bucket refills with."""
    burst: int | None = Field(default=None, gt=0)
    """Bucket size, requests; None: one second's worth of the rate (at least 1)."""

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: object) -> object:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return {"rate_rps": value}
        return value

    @property
    def capacity(self) -> float:
        """Requests the bucket holds when full."""
        return float(self.burst) if self.burst is not None else max(self.rate_rps, 1.0)


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether one request may pass, and the limit that applied."""

    allowed: bool
    tenant: str
    limit: TenantLimit


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at: datetime


class TenantLimiter:
    """Token buckets keyed by tenant; `admit` takes one token or says which limit refused."""

    def __init__(
        self,
        default: TenantLimit | None,
        overrides: dict[str, TenantLimit] | None = None,
        *,
        max_buckets: int = 10_000,
    ) -> None:
        self.default = default
        self.overrides = dict(overrides or {})
        self.max_buckets = max_buckets
        self._buckets: dict[str, _Bucket] = {}

    @property
    def active(self) -> bool:
        """False when no tenant has a limit (admit always allows)."""
        return self.default is not None or bool(self.overrides)

    def limit_for(self, tenant: str | None) -> TenantLimit | None:
        """The tenant's own limit, else the default; None: unlimited."""
        return self.overrides.get(tenant or NO_TENANT, self.default)

    def admit(self, tenant: str | None, now: datetime) -> Verdict | None:
        """Take a token from the tenant's bucket; None when the tenant has no limit."""
        name = tenant or NO_TENANT
        limit = self.limit_for(tenant)
        if limit is None:
            return None
        bucket = self._buckets.get(name)
        if bucket is None:
            if len(self._buckets) >= self.max_buckets:
                self._forget_full(now)
            bucket = self._buckets[name] = _Bucket(limit.capacity, now)
        # A clock that steps back refills nothing rather than draining the bucket.
        elapsed_s = max((now - bucket.at).total_seconds(), 0.0)
        bucket.tokens = min(limit.capacity, bucket.tokens + elapsed_s * limit.rate_rps)
        bucket.at = max(bucket.at, now)
        if bucket.tokens < 1.0:
            return Verdict(False, name, limit)
        bucket.tokens -= 1.0
        return Verdict(True, name, limit)

    def _forget_full(self, now: datetime) -> None:
        """Drop buckets that have refilled by now: a full bucket is the same as none, so
        producers inventing tenant names cannot grow the table without bound."""
        for name, bucket in list(self._buckets.items()):
            limit = self.limit_for(None if name == NO_TENANT else name)
            if limit is None:
                del self._buckets[name]
                continue
            elapsed_s = max((now - bucket.at).total_seconds(), 0.0)
            if bucket.tokens + elapsed_s * limit.rate_rps >= limit.capacity:
                del self._buckets[name]

    def __len__(self) -> int:
        """Buckets held now."""
        return len(self._buckets)

"""Per-tenant rate limits at ingest: one token bucket per tenant, on a clock the caller gives."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime, timedelta

from pydantic import BaseModel, ConfigDict, Field, model_validator

NO_TENANT = "(none)"
"""The bucket that requests naming no tenant share."""


class TenantLimit(BaseModel):
    """One tenant's rate and burst; `{"team-a": 100}` is shorthand for a rate alone."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rate_rps: float = Field(gt=0, allow_inf_nan=False)
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


RECORD_TIME_CREDIT_S = 60.0
"""How far back a record's own timestamp may date the token it takes (`bucket_time`)."""


def bucket_time(arrived: datetime, now: datetime) -> datetime:
    """The time a request takes its token at: when its record arrived (its Kafka timestamp),
    but no earlier than `RECORD_TIME_CREDIT_S` before ingest's clock.

    On ingest's clock alone, the records that waited out an ingest restart arrived all at
    once and a tenant within its limit was told it was over it. A bucket's time never goes
    back, so a producer that back-dates its records gains at most that credit's worth of
    its rate on top of the burst, once per idle stretch: never more than its rate over time.
    """
    return max(arrived, now - timedelta(seconds=RECORD_TIME_CREDIT_S))


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
    """Token buckets keyed by tenant; `admit` takes one token or says which limit refused.

    Tenants with their own limit (`overrides`, a fixed list) keep their buckets for good.
    The others share a table of at most `max_buckets`, least recently used first out, so a
    producer inventing tenant names costs one eviction a request, never a scan, and no
    memory past the cap. The trade-off: a tenant evicted before its bucket refilled comes
    back to a full one, a burst more than its limit. That takes `max_buckets` other tenants
    between two of its requests (a busy tenant is never the least recently used), and
    cycling that many names already buys a fresh bucket per new name: a per-tenant limit
    cannot stop a producer who chooses its tenant names. Refusing new tenants instead
    would let that producer lock every other tenant out. `evicted_unrefilled` counts the
    evictions that cost a limit anything.
    """

    def __init__(
        self,
        default: TenantLimit | None,
        overrides: dict[str, TenantLimit] | None = None,
        *,
        max_buckets: int = 10_000,
    ) -> None:
        if max_buckets < 1:
            raise ValueError(f"max_buckets must be at least 1, not {max_buckets}")
        self.default = default
        self.overrides = dict(overrides or {})
        self.max_buckets = max_buckets
        self._named: dict[str, _Bucket] = {}
        """Buckets of the tenants in `overrides`: never evicted."""
        self._others: OrderedDict[str, _Bucket] = OrderedDict()
        """Buckets of the tenants under the default limit, least recently used first."""
        self.evictions = 0
        """Buckets dropped to make room for a new tenant."""
        self.evicted_unrefilled = 0
        """Of those, the ones not yet full again: each a burst its tenant may get twice."""

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
        bucket = self._bucket(name, limit, now)
        # A clock that steps back refills nothing rather than draining the bucket.
        elapsed_s = max((now - bucket.at).total_seconds(), 0.0)
        bucket.tokens = min(limit.capacity, bucket.tokens + elapsed_s * limit.rate_rps)
        bucket.at = max(bucket.at, now)
        if bucket.tokens < 1.0:
            return Verdict(False, name, limit)
        bucket.tokens -= 1.0
        return Verdict(True, name, limit)

    def _bucket(self, name: str, limit: TenantLimit, now: datetime) -> _Bucket:
        """The tenant's bucket, a full one when it has none (at most one eviction)."""
        if name in self.overrides:
            bucket = self._named.get(name)
            if bucket is None:
                bucket = self._named[name] = _Bucket(limit.capacity, now)
            return bucket
        bucket = self._others.get(name)
        if bucket is not None:
            self._others.move_to_end(name)
            return bucket
        if len(self._others) >= self.max_buckets:
            self._evict_oldest(limit, now)
        bucket = self._others[name] = _Bucket(limit.capacity, now)
        return bucket

    def _evict_oldest(self, limit: TenantLimit, now: datetime) -> None:
        """Drop the least recently used default-limit bucket (`limit` is the default)."""
        _, oldest = self._others.popitem(last=False)
        self.evictions += 1
        elapsed_s = max((now - oldest.at).total_seconds(), 0.0)
        if oldest.tokens + elapsed_s * limit.rate_rps < limit.capacity:
            self.evicted_unrefilled += 1

    def __len__(self) -> int:
        """Buckets held now."""
        return len(self._named) + len(self._others)

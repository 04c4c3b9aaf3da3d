"""The request event that upstream producers send, in any language (wire format v1)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from schemas.tensors import Tensor, TextInput
from schemas.topics import RESULTS, Tier, is_legal_topic, is_reply_topic

MAX_TIMEOUT_MS = 2**31 - 1
"""The longest `timeout_ms`, as Kafka bounds its own millisecond settings."""
TENANT_MAX_CHARS = 128
"""The longest `tenant`."""

RequestId = Annotated[
    str, StringConstraints(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._:@/-]+$")
]


def _zone_optional(schema: dict[str, Any]) -> None:
    """A date-time field's JSON Schema without `format: date-time`: that format is RFC 3339,
    which needs a zone, and a producer validating with it would refuse what inferbus takes
    (a date-time with no zone is UTC)."""
    for option in schema.get("anyOf", []):
        option.pop("format", None)


class InferenceRequest(BaseModel):
    """One inference request; `inputs` maps input names to tensors or text."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    schema_version: Literal[1] = 1
    request_id: RequestId
    model: str = Field(min_length=1, max_length=63)
    model_version: str | None = Field(default=None, description="Pin a version; else latest.")
    tier: Tier = "interactive"
    # Left to right: a tensor is tried first and taken when it validates (pydantic's smart
    # mode validated every tensor against both kinds: ~0.7 µs a tensor, the same answers).
    inputs: dict[str, Annotated[Tensor | TextInput, Field(union_mode="left_to_right")]] = Field(
        min_length=1, fail_fast=True
    )
    deadline: datetime | None = Field(
        default=None,
        description="Absolute, an ISO 8601 date-time (no zone: UTC).",
        json_schema_extra=_zone_optional,
    )
    timeout_ms: int | None = Field(
        default=None,
        strict=True,
        gt=0,
        le=MAX_TIMEOUT_MS,
        description="Relative to `created_at` (else to receipt); at most 2^31-1 (24.8 days).",
    )
    reply_to: str = RESULTS
    tenant: str | None = Field(default=None, max_length=TENANT_MAX_CHARS)
    created_at: datetime | None = Field(
        default=None,
        description="When the producer made it: an ISO 8601 date-time (no zone: UTC).",
        json_schema_extra=_zone_optional,
    )
    metadata: dict[str, str] = Field(default_factory=dict, fail_fast=True)

    @field_validator("reply_to")
    @classmethod
    def _legal_reply_topic(cls, value: str) -> str:
        if not is_legal_topic(value):
            raise ValueError(
                f"reply_to {value!r} is not a legal Kafka topic name (1-249 of [A-Za-z0-9._-])"
            )
        if not is_reply_topic(value):
            raise ValueError(
                f"reply_to {value!r} is one of inferbus's own topics; results go to "
                f"{RESULTS}, {RESULTS}.<anything> or a topic of your own"
            )
        return value

    @field_validator("schema_version", mode="before")
    @classmethod
    def _the_integer_one(cls, value: object) -> object:
        """1, not true or 1.0 (lax mode took both as 1; `timeout_ms: true` is refused)."""
        if isinstance(value, bool | float | str) or value is None:
            raise ValueError("must be the integer 1 (or left out)")
        return value

    @field_validator("deadline", "created_at", mode="before")
    @classmethod
    def _a_time_not_a_number(cls, value: object) -> object:
        """As the JSON Schema says (a date-time string): lax mode read a number as a time,
        0 as the epoch and 1733440000000 as epoch ms. (`timeout_ms` is strict for the same
        reason: "5000" and 5000.0 were taken.)"""
        if isinstance(value, int | float) or (isinstance(value, str) and _is_number(value)):
            raise ValueError("must be an ISO 8601 date-time string, not a number")
        if isinstance(value, str) and _is_date_only(value):
            # Lax mode read "2026-12-06" as its midnight: a deadline hours off what was meant.
            raise ValueError("must be an ISO 8601 date-time with a time of day, not a date")
        if isinstance(value, str) and not _DATE_START.match(value):
            # pydantic's own words for "tomorrow" offer "a valid datetime or date".
            raise ValueError(
                "must be an ISO 8601 date-time string such as 2026-12-06T12:00:00Z (no zone: UTC)"
            )
        return value

    @field_validator("deadline", "created_at")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value

    def effective_deadline(self, received_at: datetime) -> datetime | None:
        """The absolute deadline: `deadline`, else `timeout_ms` after creation or receipt."""
        if self.deadline is not None:
            return self.deadline
        if self.timeout_ms is None:
            return None
        start = self.created_at or received_at
        try:
            return start + timedelta(milliseconds=self.timeout_ms)
        except OverflowError:  # past the year 9999: a deadline no clock reaches
            return None

    def effective_deadline_ms(self, received_ms: float) -> float | None:
        """`effective_deadline` as epoch milliseconds, from a receipt time in epoch ms."""
        if self.deadline is not None:
            return self.deadline.timestamp() * 1000
        if self.timeout_ms is None:
            return None
        start = self.created_at.timestamp() * 1000 if self.created_at else received_ms
        return start + self.timeout_ms


_DATE_START = re.compile(r"\s*[+-]?\d{4,}-\d{2}-\d{2}")
"""How every date-time pydantic reads begins: a date."""
_DATE_ONLY = re.compile(r"\s*[+-]?\d{4,}-\d{2}-\d{2}z?\s*", re.IGNORECASE)


def _is_date_only(text: str) -> bool:
    """Whether `text` is a date with no time of day ("2026-12-06")."""
    return _DATE_ONLY.fullmatch(text) is not None


def _is_number(text: str) -> bool:
    """Whether `text` spells a number ("0", "1733440000000", "1.5e9"), which pydantic would
    read as epoch seconds or milliseconds."""
    if ":" in text or "T" in text:  # a date-time, the usual case: no parse tried
        return False
    try:
        float(text)
    except ValueError:
        return False
    return True

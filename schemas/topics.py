"""Topic and consumer-group names of DESIGN.md section 2, in one place."""

from __future__ import annotations

import re
from typing import Literal, NamedTuple

Tier = Literal["critical", "interactive", "batch"]
TIERS: tuple[Tier, ...] = ("critical", "interactive", "batch")
"""Tiers in priority order: critical first."""


def parse_tiers(value: str) -> list[Tier]:
    """A comma list of distinct tiers (`--tiers interactive,batch`), in the order given.
    ValueError says what is wrong, worded to follow the flag's name ("--tiers names …")."""
    names = [t.strip() for t in value.split(",") if t.strip()]
    if not names:
        raise ValueError(f"names no tier (tiers: {', '.join(TIERS)})")
    unknown = [t for t in names if t not in TIERS]
    if unknown:
        listed = ", ".join(repr(t) for t in unknown)
        raise ValueError(f"names {listed}, not a tier (tiers: {', '.join(TIERS)})")
    twice = sorted({t for t in names if names.count(t) > 1})
    if twice:
        raise ValueError(f"names {', '.join(twice)} more than once")
    return names  # type: ignore[return-value]


Lane = Literal["stable", "canary"]
LANES: tuple[Lane, ...] = ("stable", "canary")
"""The two sides of a model's rollout (model.yaml `rollout`): each has its own tier topics
and worker groups, so the versions never share a queue or a consumer."""

INGEST = "inferbus.ingest"
RESULTS = "inferbus.results"
DLQ = "inferbus.dlq"
TELEMETRY = "inferbus.telemetry"
INSTANCES = "inferbus.instances"
DECISIONS = "inferbus.scaler.decisions"
SCALER_LEASE = "inferbus.scaler.lease"
"""Which of several scalers acts (`scaler/lease.py`): claims, renewals and releases."""
ROLLOUTS = "inferbus.rollouts"
"""Compacted, key = model: the rollout decision in force (rollback, promote, share)."""
INGEST_GROUP = "inferbus.ingest"

_LEGAL_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_LEGAL_MODEL = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")


def is_legal_topic(name: str) -> bool:
    """Kafka's own rule: 1-249 of [A-Za-z0-9._-], and not `.` or `..`."""
    # fullmatch: with match, `$` also matches before a trailing newline ("results\n").
    return bool(_LEGAL_TOPIC.fullmatch(name)) and name not in {".", ".."}


def is_inferbus_topic(name: str) -> bool:
    """Whether inferbus makes and keeps this topic itself (named `inferbus.` anything)."""
    return name.startswith("inferbus.")


def is_made_by_inferbus(name: str) -> bool:
    """Whether inferbus creates this topic itself, and so makes it again after a broker
    restart: its own `inferbus.` topics, but not the reply topics `inferbus.results.<x>`,
    which operators create (one per tenant, say)."""
    return is_inferbus_topic(name) and not name.startswith(f"{RESULTS}.")


def is_reply_topic(name: str) -> bool:
    """Whether results may be sent there: a legal topic that inferbus does not read or keep
    its state in (`inferbus.results` and `inferbus.results.<anything>` are for results)."""
    if not is_legal_topic(name):
        return False
    if not is_inferbus_topic(name):
        return True
    return name == RESULTS or name.startswith(f"{RESULTS}.")


def is_legal_model_name(name: str) -> bool:
    """Model names become topic segments: lower-case letters, digits, `-` and `_`."""
    return bool(_LEGAL_MODEL.fullmatch(name))


def ingest_topic(tier: Tier | None = None) -> str:
    """Where producers send requests: per tier (served in priority order), or the shared one
    for producers that do not choose (each request names its tier)."""
    return INGEST if tier is None else f"{INGEST}.{tier}"


INGEST_TOPICS: tuple[str, ...] = (INGEST, *(ingest_topic(tier) for tier in TIERS))
"""Every topic ingest reads."""

TIER_OF_INGEST_TOPIC: dict[str, Tier] = {ingest_topic(tier): tier for tier in TIERS}
"""The tier a per-tier ingest topic stands for (the shared one stands for none)."""


def _lane_infix(lane: Lane) -> str:
    # Model names have no dots (`is_legal_model_name`), so `<model>.canary.<tier>` can never
    # be read as another model's `<model>.<tier>`.
    return "" if lane == "stable" else f"{lane}."


def request_topic(model: str, tier: Tier, lane: Lane = "stable") -> str:
    """The tier topic that a model's validated requests wait on: `inferbus.req.<model>.<tier>`,
    or `inferbus.req.<model>.canary.<tier>` for the canary side of a rollout."""
    return f"inferbus.req.{model}.{_lane_infix(lane)}{tier}"


def worker_group(model: str, tier: Tier, lane: Lane = "stable") -> str:
    """The consumer group of the workers serving one model, tier and lane:
    `inferbus.workers.<model>.<tier>` or `inferbus.workers.<model>.canary.<tier>`."""
    return f"inferbus.workers.{model}.{_lane_infix(lane)}{tier}"


class GroupRef(NamedTuple):
    """What a tier topic or worker group name stands for."""

    model: str
    tier: Tier
    lane: Lane = "stable"


_TIER_NAMES: dict[str, Tier] = {tier: tier for tier in TIERS}


def _parse(name: str, prefix: tuple[str, str]) -> GroupRef | None:
    parts = name.split(".")
    tier = _TIER_NAMES.get(parts[-1])
    if parts[:2] != list(prefix) or len(parts) not in (4, 5) or tier is None:
        return None
    model = parts[2]
    if not is_legal_model_name(model):
        return None
    if len(parts) == 4:
        return GroupRef(model, tier)
    if parts[3] != "canary":
        return None
    return GroupRef(model, tier, "canary")


def parse_request_topic(topic: str) -> GroupRef | None:
    """Inverse of `request_topic`, or None for any other topic."""
    return _parse(topic, ("inferbus", "req"))


def parse_worker_group(group: str) -> GroupRef | None:
    """Inverse of `worker_group`, or None for any other name."""
    return _parse(group, ("inferbus", "workers"))

"""Topic and consumer-group names of DESIGN.md section 2, in one place."""

from __future__ import annotations

import re
from typing import Literal

Tier = Literal["critical", "interactive", "batch"]
TIERS: tuple[Tier, ...] = ("critical", "interactive", "batch")
"""Tiers in priority order: critical first."""

INGEST = "inferbus.ingest"
RESULTS = "inferbus.results"
DLQ = "inferbus.dlq"
TELEMETRY = "inferbus.telemetry"
INSTANCES = "inferbus.instances"
DECISIONS = "inferbus.scaler.decisions"
INGEST_GROUP = "inferbus.ingest"

_LEGAL_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_LEGAL_MODEL = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")


def is_legal_topic(name: str) -> bool:
    """Kafka's own rule: 1-249 of [A-Za-z0-9._-], and not `.` or `..`."""
    # fullmatch: with match, `$` also matches before a trailing newline ("results\n").
    return bool(_LEGAL_TOPIC.fullmatch(name)) and name not in {".", ".."}


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


def request_topic(model: str, tier: Tier) -> str:
    """The tier topic that a model's validated requests wait on."""
    return f"inferbus.req.{model}.{tier}"


def worker_group(model: str, tier: Tier) -> str:
    """The consumer group of the workers serving one model and tier."""
    return f"inferbus.workers.{model}.{tier}"


def parse_request_topic(topic: str) -> tuple[str, Tier] | None:
    """Inverse of `request_topic`, or None for any other topic."""
    parts = topic.split(".")
    if len(parts) != 4 or parts[:2] != ["inferbus", "req"] or parts[3] not in TIERS:
        return None
    return parts[2], parts[3]

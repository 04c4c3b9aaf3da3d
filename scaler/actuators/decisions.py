"""Every decision goes to `inferbus.scaler.decisions` keyed by group, and to the log as one line."""

from __future__ import annotations

import json
import logging
from typing import Any, Protocol

from scaler.signals import GroupDecision, GroupSignals, signals_to_dict
from schemas.topics import DECISIONS

log = logging.getLogger("inferbus.scaler.decisions")

DECISION_SCHEMA_VERSION = 1


class Producer(Protocol):
    """The one producer method used here (aiokafka's AIOKafkaProducer has it)."""

    async def send_and_wait(self, topic: str, value: bytes, key: bytes) -> Any: ...


def decision_record(
    decision: GroupDecision,
    *,
    policy: str,
    at: float,
    signals: GroupSignals | None = None,
    applied: bool = True,
    error: str | None = None,
    acting: bool = True,
) -> dict[str, Any]:
    """The JSON event: the decision, its inputs and whether the actuator applied it.

    `acting`: the scaler acts on its decisions (not a dry run). Workers read `desired` of
    an acting scaler's decisions to know how many of them consume (the rest stand by).
    """
    return {
        "schema_version": DECISION_SCHEMA_VERSION,
        "policy": policy,
        "at": at,
        "model": decision.model,
        "tier": decision.tier,
        **decision.to_dict(),
        "applied": applied,
        "acting": acting,
        "error": error,
        "signals": signals_to_dict(signals) if signals is not None else None,
    }


async def publish_decision(
    producer: Producer,
    decision: GroupDecision,
    *,
    policy: str,
    at: float,
    signals: GroupSignals | None = None,
    applied: bool = True,
    error: str | None = None,
    acting: bool = True,
    topic: str = DECISIONS,
) -> None:
    """Log the decision's readable line and produce its record keyed by group."""
    record = decision_record(
        decision,
        policy=policy,
        at=at,
        signals=signals,
        applied=applied,
        error=error,
        acting=acting,
    )
    suffix = "" if applied else f" (not applied: {error or 'dry run'})"
    log.info("%s%s", decision.line(), suffix)
    await producer.send_and_wait(
        topic, json.dumps(record, separators=(",", ":")).encode(), key=decision.group.encode()
    )

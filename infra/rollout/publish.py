"""Publishing a rollout decision: one record keyed by model, and one log line."""

from __future__ import annotations

import logging
from typing import Any, Protocol

from schemas.rollout import RolloutRecord
from schemas.topics import ROLLOUTS

log = logging.getLogger("inferbus.rollouts")


class Producer(Protocol):
    """The one producer method used here (aiokafka's AIOKafkaProducer has it)."""

    async def send_and_wait(self, topic: str, value: bytes, key: bytes) -> Any: ...


async def publish_rollout(
    producer: Producer, record: RolloutRecord, *, topic: str = ROLLOUTS
) -> None:
    """Produce the record (acked by all replicas) and log its line with its numbers."""
    await producer.send_and_wait(
        topic, record.model_dump_json(exclude_none=True).encode(), key=record.model.encode()
    )
    evidence = record.evidence
    if evidence is None:
        log.info("event=rollout_decision %s", record.line())
        return
    log.warning(
        "event=rollout_decision %s | window_s=%g rule=%s stable=%s requests=%d errors=%d "
        "error_rate=%.4f p99_ms=%s canary=%s requests=%d errors=%d error_rate=%.4f p99_ms=%s",
        record.line(),
        evidence.window_s,
        evidence.rule,
        evidence.stable.version,
        evidence.stable.requests,
        evidence.stable.errors,
        evidence.stable.error_rate,
        _ms(evidence.stable.p99_ms),
        evidence.canary.version,
        evidence.canary.requests,
        evidence.canary.errors,
        evidence.canary.error_rate,
        _ms(evidence.canary.p99_ms),
    )


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"

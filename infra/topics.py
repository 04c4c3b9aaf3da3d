"""Create the topics of DESIGN.md section 2, idempotently."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from aiokafka.admin import NewTopic
from aiokafka.errors import TopicAlreadyExistsError

from infra.kafka import make_admin
from schemas import topics
from schemas.topics import TIERS, Tier

log = logging.getLogger(__name__)

DEFAULT_TIER_PARTITIONS = 12


@dataclass(frozen=True)
class TopicSpec:
    """A topic to provision."""

    name: str
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)


def standard_topics(
    models: Iterable[str],
    *,
    tiers: Sequence[Tier] = TIERS,
    tier_partitions: int = DEFAULT_TIER_PARTITIONS,
    shared_partitions: int = 6,
) -> list[TopicSpec]:
    """Every topic an inferbus installation serving `models` needs."""
    specs = [
        *(TopicSpec(topic, shared_partitions) for topic in topics.INGEST_TOPICS),
        TopicSpec(topics.RESULTS, shared_partitions),
        TopicSpec(topics.DLQ, 1),
        TopicSpec(topics.TELEMETRY, 1),
        TopicSpec(topics.INSTANCES, 1, {"cleanup.policy": "compact"}),
        TopicSpec(topics.DECISIONS, 1),
    ]
    for model in sorted(set(models)):
        specs.extend(
            TopicSpec(topics.request_topic(model, tier), tier_partitions) for tier in tiers
        )
    return specs


async def ensure_topics(bootstrap: str, specs: Sequence[TopicSpec]) -> list[str]:
    """Create the missing topics; returns the names created. Safe to call again."""
    admin = make_admin(bootstrap, client_id="inferbus-topics")
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        missing = [spec for spec in specs if spec.name not in existing]
        created: list[str] = []
        for spec in missing:
            try:
                await admin.create_topics(
                    [NewTopic(spec.name, spec.partitions, 1, topic_configs=spec.configs)]
                )
            except TopicAlreadyExistsError:
                log.info("event=topic_exists topic=%s", spec.name)
                continue
            created.append(spec.name)
        if created:
            log.info("event=topics_created count=%d topics=%s", len(created), ",".join(created))
        return created
    finally:
        await admin.close()


async def partition_count(bootstrap: str, topic: str) -> int:
    """Partitions of one topic (0 when it does not exist)."""
    admin = make_admin(bootstrap, client_id="inferbus-topics")
    await admin.start()
    try:
        described = await admin.describe_topics([topic])
    finally:
        await admin.close()
    for entry in described:
        if entry.get("topic") == topic and entry.get("error_code", 0) == 0:
            return len(entry.get("partitions", []))
    return 0

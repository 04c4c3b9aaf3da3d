"""Create the topics of DESIGN.md section 2, idempotently."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiokafka.admin import NewTopic
from aiokafka.errors import (
    ClusterAuthorizationFailedError,
    KafkaError,
    TopicAlreadyExistsError,
    TopicAuthorizationFailedError,
    for_code,
)

from infra.kafka import make_admin
from infra.models.repository import ModelRepository
from infra.settings import KafkaSettings, kafka_settings
from infra.tasks import cancel_and_wait
from schemas import topics
from schemas.errors import InferbusError
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
    canaries: Iterable[str] = (),
    tiers: Sequence[Tier] = TIERS,
    tier_partitions: int = DEFAULT_TIER_PARTITIONS,
    shared_partitions: int = 6,
) -> list[TopicSpec]:
    """Every topic an inferbus installation serving `models` needs; `canaries` are the
    models with a canary rollout (they get a second set of tier topics)."""
    specs = [
        *(TopicSpec(topic, shared_partitions) for topic in topics.INGEST_TOPICS),
        TopicSpec(topics.RESULTS, shared_partitions),
        TopicSpec(topics.DLQ, 1),
        TopicSpec(topics.TELEMETRY, 1),
        TopicSpec(topics.INSTANCES, 1, {"cleanup.policy": "compact"}),
        TopicSpec(topics.DECISIONS, 1),
        TopicSpec(topics.SCALER_LEASE, 1),
        TopicSpec(topics.ROLLOUTS, 1, {"cleanup.policy": "compact"}),
    ]
    for model in sorted(set(models)):
        specs.extend(
            TopicSpec(topics.request_topic(model, tier), tier_partitions) for tier in tiers
        )
    for model in sorted(set(canaries)):
        specs.extend(
            TopicSpec(topics.request_topic(model, tier, "canary"), tier_partitions)
            for tier in tiers
        )
    return specs


def canary_models(repository: ModelRepository) -> list[str]:
    """Models whose model.yaml names a canary (an invalid model.yaml names none)."""
    found = []
    for name in repository.names():
        try:
            rollout = repository.config(name).rollout
        except InferbusError:
            continue  # reported where the model is used; its stable topics still exist
        if rollout is not None and rollout.canary is not None:
            found.append(name)
    return found


def repository_topics(repository: ModelRepository, **options: Any) -> list[TopicSpec]:
    """`standard_topics` for every model in the repository, canary topics included."""
    return standard_topics(repository.names(), canaries=canary_models(repository), **options)


def created_topics(answer: Any) -> list[str]:
    """The topics a CreateTopics answer says were made; one that already exists (made by
    someone else meanwhile) is not. Any other refusal raises the broker's error, named.

    aiokafka's admin `create_topics` returns the answer without looking at it: a topic
    refused (no CREATE permission, an invalid setting) would otherwise pass for created.
    """
    created: list[str] = []
    for topic, code, *rest in answer.topic_errors:
        if code == 0:
            created.append(topic)
            continue
        error = for_code(code)
        if error is TopicAlreadyExistsError:
            continue
        message = rest[0] if rest and rest[0] else error.description
        raise error(f"topic {topic!r} not created: {message}")
    return created


def new_topic(spec: TopicSpec, settings: KafkaSettings | None = None) -> NewTopic:
    """The CreateTopics entry for `spec`: the replication factor of the settings, and a
    `max.message.bytes` that admits the largest produce request a client sends (a record
    batch passes `max_batch_bytes` by its last record; the broker's default is ~1 MiB)."""
    settings = settings or kafka_settings()
    configs = {"max.message.bytes": str(settings.max_request_bytes), **spec.configs}
    return NewTopic(spec.name, spec.partitions, settings.replication_factor, topic_configs=configs)


async def ensure_topics(bootstrap: str, specs: Sequence[TopicSpec]) -> list[str]:
    """Create the missing topics; returns the names created. Safe to call again; a topic
    the broker refuses raises its error (`created_topics`)."""
    admin = make_admin(bootstrap, client_id="inferbus-topics")
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        missing = [spec for spec in specs if spec.name not in existing]
        created: list[str] = []
        for spec in missing:
            made = created_topics(await admin.create_topics([new_topic(spec)]))
            if not made:
                log.info("event=topic_exists topic=%s", spec.name)
            created.extend(made)
        if created:
            log.info("event=topics_created count=%d topics=%s", len(created), ",".join(created))
        return created
    finally:
        await admin.close()


async def topic_names(bootstrap: str) -> list[str]:
    """Every topic the broker has."""
    admin = make_admin(bootstrap, client_id="inferbus-topics")
    await admin.start()
    try:
        return sorted(await admin.list_topics())
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


BROKER_EVENT_KEY = b"__broker__"
"""Key of the registry record that says the broker lost its logs and topics were re-created:
every instance reads its partitions from the start again (`services.runtime`)."""


def recreated_topics(note: bytes | None) -> frozenset[str] | None:
    """The logs a BROKER_EVENT_KEY note says started over; None: every log.

    Only models' tier topics are taken by name: those are made when a model is added (its
    topics are new, and only they are read from the start). A note naming any other topic
    means the broker lost its state, where a topic some client wrote to first (made by the
    write, so not named) started over too. A note that names nothing readable is read as
    every log as well: reading too much again repeats answers, too little loses requests.
    """
    try:
        raw = orjson.loads(note or b"")
    except orjson.JSONDecodeError:
        return None
    named = raw.get("topics") if isinstance(raw, dict) else None
    if not isinstance(named, list) or not all(isinstance(t, str) for t in named):
        return None
    if any(topics.parse_request_topic(t) is None for t in named):
        return None
    return frozenset(named)


AWAY_RETRY_S = 0.2
"""How often the keeper asks for a broker that is away."""
REFUSED = (TopicAuthorizationFailedError, ClusterAuthorizationFailedError)
"""A broker that answers but will not let this principal create topics."""


class TopicKeeper:
    """Keeps the topics an installation needs in existence: a broker that lost its state
    (the embedded one keeps none) gets them back within `every_s`, before clients give up.

    One admin connection, a `list_topics` per round; errors while the broker is away are
    expected and logged at most once per outage.
    """

    def __init__(
        self,
        bootstrap: str,
        specs: Callable[[], Sequence[TopicSpec]],
        *,
        every_s: float = 2.0,
        announce: Callable[[list[str]], Awaitable[None]] | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        self.specs = specs
        self.every_s = every_s
        self.announce = announce
        """Told the topics it created; ingest writes the BROKER_EVENT_KEY record with it."""
        self._unannounced: list[str] = []
        self.recreated = 0
        """Topics created again after the first round found them missing."""
        self._task: asyncio.Task[None] | None = None
        self._admin: Any = None
        self._away = False
        self._refused = False
        """The last round's creation was refused (said once until a round succeeds)."""

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="topic-keeper")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)
        if self._admin is not None:
            with contextlib.suppress(KafkaError):
                await self._admin.close()
            self._admin = None

    async def _run(self) -> None:
        while True:
            # While the broker is away, ask again often: every moment between its return
            # and the topics' re-creation is a moment producers write to topics it lacks.
            await asyncio.sleep(AWAY_RETRY_S if self._away else self.every_s)
            try:
                created = await self.round()
            except REFUSED as exc:  # the broker answers: ask again at the usual pace
                if not self._refused:
                    log.error(
                        "event=topic_keeper_refused error=%r (this principal may not create "
                        "topics: create them with `inferbus topics create` as an admin, and "
                        "set INFERBUS_INGEST_KEEP_TOPICS=false; docs/security.md)",
                        exc,
                    )
                self._refused = True
                continue
            except Exception as exc:  # the keeper must outlive any broker trouble: said once
                if not self._away:
                    log.warning("event=topic_keeper_failed error=%r (retrying)", exc)
                self._away = True
                await self._reset()
                continue
            if self._away:
                log.info("event=topic_keeper_broker_back recreated=%d", len(created))
            self._away = self._refused = False

    async def round(self) -> list[str]:
        """One check: create what is missing; returns the names created."""
        if self._admin is None:
            self._admin = make_admin(self.bootstrap, client_id="inferbus-topic-keeper")
            await self._admin.start()
        specs = list(self.specs())
        existing = set(await self._admin.list_topics())
        missing = [spec for spec in specs if spec.name not in existing]
        created: list[str] = []
        if missing:
            # One request for all; one that someone else made meanwhile is not counted.
            created = created_topics(
                await self._admin.create_topics([new_topic(spec) for spec in missing])
            )
        if created:
            self.recreated += len(created)
            log.warning(
                "event=topics_recreated count=%d topics=%s", len(created), ",".join(created)
            )
            # After an outage the broker lost its state, whatever this round found missing:
            # a round that failed half-way may have made some topics unannounced. Name every
            # topic then, so that readers take it as every log starting over.
            self._unannounced.extend([spec.name for spec in specs] if self._away else created)
        if self._unannounced and self.announce is not None:
            # Said until it is heard: a failed announcement is retried next round.
            await self.announce(list(self._unannounced))
            self._unannounced.clear()
        return created

    async def _reset(self) -> None:
        admin, self._admin = self._admin, None
        if admin is not None:
            with contextlib.suppress(Exception):  # a half-dead client: only its closing failed
                await admin.close()

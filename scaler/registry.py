"""The instance registry: a pure fold of `inferbus.instances` records, and its consume loop."""

from __future__ import annotations

import asyncio
import logging
import statistics
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

from pydantic import ValidationError

from infra.feed import FEED_WAIT_MS, LOG_END_CHECK_S
from infra.kafka import make_consumer, stop_consume_loop
from infra.log_end import LogEndProbe, rewind_restarted_logs
from infra.registry import (
    READY_HISTORY,
    RegistryTable,
    decode,
    fold,
    fold_all,
    fold_value,
    is_live,
    live_instances,
    tombstone,
)
from infra.topics import BROKER_EVENT_KEY
from schemas.telemetry import INSTANCE_STATES, InstanceRecord, InstanceState
from schemas.topics import INSTANCES

log = logging.getLogger(__name__)

__all__ = [
    "READY_HISTORY",
    "ReadyTime",
    "Registry",
    "RegistryTable",
    "decode",
    "fold",
    "fold_all",
    "groups_with_live_members",
    "is_live",
    "live_instances",
    "ready_time",
    "replicas_by_state",
    "standby_replicas",
    "tombstone",
]


def replicas_by_state(
    table: RegistryTable, group: str, now: datetime | None = None
) -> dict[InstanceState, int]:
    """Live consuming instances of one consumer group, counted by state (every state
    present, gone = 0); warm standbys are counted apart, by `standby_replicas`.

    An instance whose lease ran out (its process died without a word) counts as gone. A
    `ready` worker that holds no partitions yet (still joining) counts as `warming`, so the
    policy sees capacity on its way instead of adding more.
    """
    moment = now or datetime.now(UTC)
    counts: dict[InstanceState, int] = dict.fromkeys(INSTANCE_STATES, 0)
    for record in _live_members(table, group, moment):
        if record.standby and record.state == "ready":
            continue
        joining = record.state == "ready" and record.partitions == 0
        counts["warming" if joining else record.state] += 1
    return counts


def standby_replicas(table: RegistryTable, group: str, now: datetime | None = None) -> int:
    """Live workers of the group standing by: loaded, warm, holding no partition."""
    moment = now or datetime.now(UTC)
    return sum(1 for r in _live_members(table, group, moment) if r.standby and r.state == "ready")


def newest_ready_at(table: RegistryTable, group: str, now: datetime | None = None) -> float | None:
    """When the group's most recently ready live consumer became ready (epoch s), or None."""
    moment = now or datetime.now(UTC)
    times = [
        record.ready_at.timestamp()
        for record in _live_members(table, group, moment)
        if record.ready_at is not None and not record.standby
    ]
    return max(times, default=None)


def groups_with_live_members(table: RegistryTable, now: datetime) -> frozenset[str]:
    """Every consumer group a live instance serves."""
    out: set[str] = set()
    for record in live_instances(table, now).values():
        out.add(record.group)
        out.update(record.groups)
    return frozenset(out)


def _live_members(table: RegistryTable, group: str, now: datetime) -> list[InstanceRecord]:
    return [
        record
        for record in table.instances.values()
        if (record.group == group or group in record.groups) and is_live(record, now)
    ]


@dataclass(frozen=True)
class ReadyTime:
    """Measured time-to-ready of a group: median and worst of the recent measurements."""

    median_s: float
    max_s: float
    samples: int


def ready_time(table: RegistryTable, group: str) -> ReadyTime | None:
    """Recent time-to-ready of a group, or None before any instance became ready."""
    history = table.time_to_ready_s.get(group, ())
    if not history:
        return None
    return ReadyTime(statistics.median(history), max(history), len(history))


class Registry:
    """Reads `inferbus.instances` from the beginning and keeps the folded table current.

    `caught_up` is set once the records present at start have been folded. A log that a
    restarted broker began again is read from its start (checked every `LOG_END_CHECK_S`).
    """

    def __init__(
        self, bootstrap: str, topic: str = INSTANCES, poll_timeout_ms: int = FEED_WAIT_MS
    ) -> None:
        self._bootstrap = bootstrap
        self._topic = topic
        self._poll_timeout_ms = poll_timeout_ms
        self.table = RegistryTable()
        self.caught_up = asyncio.Event()
        self.invalid_records = 0
        self.error: BaseException | None = None
        """Set when the consume loop died; the table then stops updating."""
        self._task: asyncio.Task[None] | None = None
        self._consumer: Any = None
        self._log_ends = LogEndProbe(bootstrap, client_id="inferbus-registry")

    async def start(self) -> None:
        """Start consuming (idempotent)."""
        if self._task is not None:
            return
        consumer = make_consumer(
            bootstrap=self._bootstrap,
            group_id=None,
            client_id="inferbus-registry",
            fetch_max_wait_ms=self._poll_timeout_ms,
        )
        await consumer.start()
        self._consumer = consumer
        self._task = asyncio.create_task(self._run(), name="inferbus-registry")
        self._task.add_done_callback(self._on_done)

    def _on_done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            self.error = task.exception()
            log.error("registry loop stopped topic=%s error=%r", self._topic, self.error)

    async def _assign(self) -> dict[Any, int] | None:
        """Assign every partition from the beginning; the end offsets to catch up to, or None."""
        from aiokafka import TopicPartition

        consumer = self._consumer
        await consumer.topics()  # Refreshes metadata so a topic created since start shows up.
        partitions = consumer.partitions_for_topic(self._topic)
        if not partitions:
            return None
        tps = [TopicPartition(self._topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        return dict(await consumer.end_offsets(tps))

    async def _run(self) -> None:
        targets = await self._assign()
        while targets is None:
            self.caught_up.set()  # Nothing to catch up on while the topic does not exist.
            await asyncio.sleep(self._poll_timeout_ms / 1000)
            targets = await self._assign()
        pending = {tp: end for tp, end in targets.items() if end > 0}
        if not pending:
            self.caught_up.set()  # an empty log: nothing to wait a fetch for
        checked_at = time.monotonic()
        while True:
            batches = await self._consumer.getmany(timeout_ms=self._poll_timeout_ms)
            for tp, messages in batches.items():
                for message in messages:
                    self._apply(message.key, message.value)
                    if tp in pending and message.offset + 1 >= pending[tp]:
                        del pending[tp]
            if not self.caught_up.is_set() and (not pending or not batches):
                # An empty poll also means caught up: a short (Tansu) end offset must not block.
                self.caught_up.set()
            if time.monotonic() - checked_at >= LOG_END_CHECK_S:
                checked_at = time.monotonic()
                for tp in await rewind_restarted_logs(
                    self._consumer, self._log_ends, what="registry"
                ):
                    pending.pop(tp, None)  # the old log's end is not this one's

    def _apply(self, key: bytes | None, value: bytes | None) -> None:
        if key == BROKER_EVENT_KEY:
            return  # a note to the instances, not an instance
        try:
            self.table = fold_value(self.table, key, value)
        except ValidationError as exc:
            self.invalid_records += 1
            log.warning("registry record invalid key=%r error=%s", key, exc.errors()[:1])

    def view(self) -> Mapping[str, InstanceRecord]:
        """A read-only view of the live instances."""
        return MappingProxyType(dict(self.table.instances))

    async def close(self) -> None:
        """Stop consuming (idempotent)."""
        task, self._task = self._task, None
        consumer, self._consumer = self._consumer, None
        await stop_consume_loop(task, consumer)
        await self._log_ends.close()

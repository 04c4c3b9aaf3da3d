"""The instance registry: a pure fold of `inferbus.instances` records, and its consume loop."""

from __future__ import annotations

import asyncio
import logging
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from pydantic import ValidationError

from infra.kafka import make_consumer, stop_consume_loop
from schemas.telemetry import INSTANCE_STATES, InstanceRecord, InstanceState
from schemas.topics import INSTANCES

log = logging.getLogger(__name__)

READY_HISTORY = 32
"""Time-to-ready measurements kept per group (newest last)."""


@dataclass(frozen=True)
class RegistryTable:
    """Current registry: the latest record per live instance, and measured time-to-ready."""

    instances: Mapping[str, InstanceRecord] = field(default_factory=dict)
    time_to_ready_s: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    """Per group: seconds from process start to ready, one per instance that became ready."""


def _time_to_ready(record: InstanceRecord) -> float | None:
    if record.time_to_ready_s is not None:
        return record.time_to_ready_s
    elapsed = (record.updated_at - record.started_at).total_seconds()
    return elapsed if elapsed >= 0 else None


def fold(table: RegistryTable, record: InstanceRecord) -> RegistryTable:
    """Apply one record: latest per instance id wins, `gone` removes, ready records a time."""
    previous = table.instances.get(record.instance_id)
    if previous is not None and record.updated_at < previous.updated_at:
        return table  # An older update replayed out of order: the table already knows better.
    instances = dict(table.instances)
    if record.state == "gone":
        instances.pop(record.instance_id, None)
    else:
        instances[record.instance_id] = record
    ready_times = table.time_to_ready_s
    became_ready = record.state == "ready" and (previous is None or previous.state != "ready")
    measured = _time_to_ready(record) if became_ready else None
    if measured is not None:
        history = (*table.time_to_ready_s.get(record.group, ()), measured)[-READY_HISTORY:]
        ready_times = {**table.time_to_ready_s, record.group: history}
    return replace(table, instances=instances, time_to_ready_s=ready_times)


def fold_all(
    records: Iterable[InstanceRecord], table: RegistryTable | None = None
) -> RegistryTable:
    """Fold records in order, from an empty table unless one is given."""
    current = table or RegistryTable()
    for record in records:
        current = fold(current, record)
    return current


def tombstone(table: RegistryTable, instance_id: str) -> RegistryTable:
    """A compaction tombstone (null value) for an instance removes it like `gone`."""
    if instance_id not in table.instances:
        return table
    instances = {k: v for k, v in table.instances.items() if k != instance_id}
    return replace(table, instances=instances)


def replicas_by_state(table: RegistryTable, group: str) -> dict[InstanceState, int]:
    """Live instances of one consumer group, counted by state (every state present, gone = 0).

    A `ready` worker that reports no partitions yet has loaded and warmed up but not
    finished joining its group (a rebalance can take seconds): it counts as `warming`,
    so the policy sees capacity on its way instead of adding more.
    """
    counts: dict[InstanceState, int] = dict.fromkeys(INSTANCE_STATES, 0)
    for record in table.instances.values():
        if record.group == group:
            joining = record.state == "ready" and record.partitions == 0
            counts["warming" if joining else record.state] += 1
    return counts


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


def decode(value: bytes | None) -> InstanceRecord | None:
    """Parse one record's value; None for a tombstone. Raises ValidationError when invalid."""
    if value is None:
        return None
    return InstanceRecord.model_validate_json(value)


class Registry:
    """Reads `inferbus.instances` from the beginning and keeps the folded table current.

    `caught_up` is set once the records present at start have been folded.
    """

    def __init__(self, bootstrap: str, topic: str = INSTANCES, poll_timeout_ms: int = 500) -> None:
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

    async def start(self) -> None:
        """Start consuming (idempotent)."""
        if self._task is not None:
            return
        consumer = make_consumer(
            bootstrap=self._bootstrap,
            group_id=None,
            client_id="inferbus-registry",
            fetch_max_wait_ms=500,  # aiokafka's default: the registry changes rarely.
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

    def _apply(self, key: bytes | None, value: bytes | None) -> None:
        try:
            record = decode(value)
        except ValidationError as exc:
            self.invalid_records += 1
            log.warning("registry record invalid key=%r error=%s", key, exc.errors()[:1])
            return
        if record is None:
            if key is not None:
                self.table = tombstone(self.table, key.decode(errors="replace"))
            return
        self.table = fold(self.table, record)

    def view(self) -> Mapping[str, InstanceRecord]:
        """A read-only view of the live instances."""
        return MappingProxyType(dict(self.table.instances))

    async def close(self) -> None:
        """Stop consuming (idempotent)."""
        task, self._task = self._task, None
        consumer, self._consumer = self._consumer, None
        await stop_consume_loop(task, consumer)

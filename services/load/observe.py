"""What the stack did during a run: replicas by state (registry) and the scaler's decisions.

`StackObserver` reads `inferbus.instances` from the beginning (the scaler's own Registry)
and `inferbus.scaler.decisions` from the run's start; it samples replicas by state every
second. The parsing is pure (`decision_point`, `ReplicaSample.of`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from infra.feed import feed_wait_ms
from infra.gaps import GapGuard, getmany_in_order
from infra.kafka import make_consumer, start_with_retry
from infra.registry import RegistryTable, live_instances
from infra.tasks import wait_ended, wait_event
from scaler.registry import Registry, ready_time
from schemas.topics import DECISIONS

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DecisionPoint:
    """One scaler decision for one group, with the signals it was made on."""

    t_s: float
    group: str
    tier: str
    current: int
    desired: int
    applied: bool
    diagnosis: str
    line: str
    lag: int | None
    arrival_rps: float | None
    ready: int | None
    replicas: int | None
    e2e_p99_ms: float | None
    queue_p99_ms: float | None
    engine_p99_ms: float | None
    service_rps_per_replica: float | None


def _number(signals: Mapping[str, Any], key: str) -> float | None:
    value = signals.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def decision_point(record: Mapping[str, Any], origin: float) -> DecisionPoint | None:
    """A decision record (scaler/actuators/decisions.py) on the run's clock; None if foreign."""
    try:
        at, group = float(record["at"]), str(record["group"])
        current, desired = int(record["current"]), int(record["desired"])
    except (KeyError, TypeError, ValueError):
        return None
    signals = record.get("signals") or {}
    reasons = "; ".join(
        str(r.get("message", "")) for r in record.get("reasons") or [] if isinstance(r, dict)
    )
    arrow = f"{current}→{desired}" if desired != current else "hold"
    diagnosis = str(record.get("diagnosis", ""))
    lag = _number(signals, "lag")
    ready, replicas = _number(signals, "ready_replicas"), _number(signals, "replicas")
    return DecisionPoint(
        t_s=round(at - origin, 2),
        group=group,
        tier=str(record.get("tier", "")),
        current=current,
        desired=desired,
        applied=bool(record.get("applied")),
        diagnosis=diagnosis,
        line=f"{record.get('tier', '')} {arrow} ({diagnosis}): {reasons or diagnosis}",
        lag=None if lag is None else int(lag),
        arrival_rps=_number(signals, "arrival_rps"),
        ready=None if ready is None else int(ready),
        replicas=None if replicas is None else int(replicas),
        e2e_p99_ms=_number(signals, "e2e_p99_ms"),
        queue_p99_ms=_number(signals, "queue_p99_ms"),
        engine_p99_ms=_number(signals, "engine_p99_ms"),
        service_rps_per_replica=_number(signals, "service_rps_per_replica"),
    )


REPLICA_STATES = ("loading", "warming", "joining", "ready", "draining")
"""States a sample counts: `joining` is registered ready but holding no partition yet (or
kept on standby); `ready` consumes."""


def replica_states(table: RegistryTable, group: str, now: datetime) -> dict[str, int]:
    """Live workers of a group by state (instances past their lease are gone)."""
    counts = dict.fromkeys(REPLICA_STATES, 0)
    for record in live_instances(table, now).values():
        if record.group != group and group not in record.groups:
            continue
        if record.state == "ready" and record.partitions == 0:
            counts["joining"] += 1
        elif record.state in counts:
            counts[record.state] += 1
    return counts


@dataclass(frozen=True)
class ReplicaSample:
    """Live workers of one group by state at one moment."""

    t_s: float
    group: str
    states: Mapping[str, int]

    @classmethod
    def of(cls, table: RegistryTable, group: str, t_s: float, now: datetime) -> ReplicaSample:
        return cls(round(t_s, 2), group, replica_states(table, group, now))


def ingest_instances(table: RegistryTable, now: datetime) -> int:
    """Live ingest instances in the registry."""
    return sum(1 for r in live_instances(table, now).values() if r.service == "inferbus-ingest")


def workers_of(table: RegistryTable, group: str, now: datetime) -> int:
    """Live workers (any state) of a group."""
    return sum(replica_states(table, group, now).values())


class StackObserver:
    """Registry samples and decisions from `start()` until `stop()`; times on `clock()`."""

    def __init__(
        self,
        bootstrap: str,
        groups: Sequence[str],
        *,
        clock: Callable[[], float] = time.time,
        sample_every_s: float = 1.0,
    ) -> None:
        self.bootstrap = bootstrap
        self.groups = list(groups)
        self.clock = clock
        self.sample_every_s = sample_every_s
        self.origin = clock()
        self.registry = Registry(bootstrap, poll_timeout_ms=feed_wait_ms(sample_every_s))
        self.replicas: list[ReplicaSample] = []
        self.decisions: list[DecisionPoint] = []
        self._consumer: AIOKafkaConsumer | None = None
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self, *, catch_up_s: float = 5.0) -> None:
        """Catch up with the registry and position at the end of the decisions."""
        await self.registry.start()
        await wait_event(self.registry.caught_up, catch_up_s)
        consumer = make_consumer(
            bootstrap=self.bootstrap, group_id=None, client_id="inferbus-load-observer"
        )
        await start_with_retry(consumer.start, what="load-observer")
        self._consumer = consumer
        await consumer.topics()
        partitions = consumer.partitions_for_topic(DECISIONS) or set()
        tps = [TopicPartition(DECISIONS, p) for p in sorted(partitions)]
        if tps:
            consumer.assign(tps)
            await consumer.seek_to_end(*tps)
            for tp in tps:
                await consumer.position(tp)
        else:
            log.warning("event=no_decisions_topic topic=%s", DECISIONS)

    def begin(self, origin: float) -> None:
        """Start recording, with times relative to `origin` (the run's start on `clock`)."""
        self.origin = origin
        self._tasks = [asyncio.create_task(self._sample(), name="load-registry-samples")]
        if self._consumer is not None and self._consumer.assignment():
            self._tasks.append(asyncio.create_task(self._read(), name="load-decisions"))

    def table(self) -> RegistryTable:
        return self.registry.table

    def time_to_ready_s(self, group: str) -> float | None:
        """The group's measured median time-to-ready, if any worker became ready yet."""
        measured = ready_time(self.registry.table, group)
        return measured.median_s if measured is not None else None

    async def _sample(self) -> None:
        while True:
            now = datetime.now(UTC)
            t_s = self.clock() - self.origin
            for group in self.groups:
                self.replicas.append(ReplicaSample.of(self.registry.table, group, t_s, now))
            await asyncio.sleep(self.sample_every_s)

    async def _read(self) -> None:
        consumer = self._consumer
        assert consumer is not None
        gaps = GapGuard()
        while True:
            batches = await getmany_in_order(consumer, gaps, timeout_ms=500)
            for records in batches.values():
                for record in records:
                    self._apply(record.value)

    def _apply(self, value: bytes | None) -> None:
        try:
            raw = json.loads(value) if value is not None else None
        except ValueError:
            log.warning("event=bad_decision_record")
            return
        point = decision_point(raw, self.origin) if isinstance(raw, dict) else None
        if point is not None and point.group in self.groups:
            self.decisions.append(point)

    async def stop(self) -> None:
        """Stop recording and disconnect (idempotent)."""
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        for task in tasks:
            await wait_ended(task)
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            await consumer.stop()
        await self.registry.close()

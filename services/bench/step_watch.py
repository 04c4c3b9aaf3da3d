"""What a scale-step run watches beside the answers: the tier topic, the registry, the
processes (how many workers run, and every process's CPU), and the worker it kills."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from aiokafka import TopicPartition
from pydantic import ValidationError

from infra.gaps import GapGuard, getmany_in_order
from infra.kafka import make_consumer, start_with_retry
from infra.registry import decode, fold_all
from infra.tasks import cancel_and_wait, wait_event
from infra.topics import BROKER_EVENT_KEY
from schemas.telemetry import InstanceRecord
from schemas.topics import INSTANCES
from services.bench.cpu import machine_busy_s, process_cpu_total
from services.bench.step_report import Landed

log = logging.getLogger(__name__)


WATCH_FETCH_WAIT_MS = 200
"""The watcher's fetch wait: it reads for the record, not for the moment."""


class TopicWatch:
    """Reads the tier topic (each request's partition, offset, timestamp) and the registry
    (every record of the group's workers) for the whole run."""

    def __init__(self, bootstrap: str, *, topic: str, group: str) -> None:
        self.topic, self.group = topic, group
        # Its records carry their own timestamps, so how often it reads changes nothing it
        # measures; a long fetch wait keeps it from competing with the stack for the broker
        # (a 5 ms wait over 13 partitions made it one of the broker's busiest clients).
        self._consumer = make_consumer(
            bootstrap=bootstrap,
            group_id=None,
            client_id="inferbus-bench-watch",
            fetch_max_wait_ms=WATCH_FETCH_WAIT_MS,
        )
        self.requests: dict[str, Landed] = {}
        self.tier_repeats = 0
        self.invalid_registry = 0
        """Registry records that did not decode (counted, logged, left out)."""
        """Request ids found on the tier topic more than once (ingest repeated them)."""
        self.registry: list[InstanceRecord] = []
        self.partitions = 0
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await start_with_retry(self._consumer.start, what="bench-watch")
        await self._consumer.topics()
        tier = sorted(self._consumer.partitions_for_topic(self.topic) or ())
        control = sorted(self._consumer.partitions_for_topic(INSTANCES) or ())
        self.partitions = len(tier)
        tier_tps = [TopicPartition(self.topic, p) for p in tier]
        control_tps = [TopicPartition(INSTANCES, p) for p in control]
        self._consumer.assign(tier_tps + control_tps)
        await self._consumer.seek_to_end(*tier_tps)
        await self._consumer.seek_to_beginning(*control_tps)
        for tp in tier_tps:
            await self._consumer.position(tp)
        self._task = asyncio.create_task(self._read(), name="bench-watch")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        await self._consumer.stop()

    async def _read(self) -> None:
        gaps = GapGuard()
        while True:
            batches = await getmany_in_order(self._consumer, gaps, timeout_ms=200)
            for tp, records in batches.items():
                for record in records:
                    if tp.topic == INSTANCES:
                        self._registry(record.key, record.value)
                    elif record.key is not None:
                        request_id = record.key.decode(errors="replace")
                        if request_id in self.requests:
                            self.tier_repeats += 1
                            continue
                        self.requests[request_id] = Landed(
                            record.partition, record.offset, record.timestamp / 1000
                        )

    def _registry(self, key: bytes | None, value: bytes | None) -> None:
        if key == BROKER_EVENT_KEY:  # the broker's own notes share the topic
            return
        try:
            record = decode(value)
        except ValidationError as exc:
            self.invalid_registry += 1
            log.warning("event=bench_watch_invalid_registry_record error=%s", str(exc)[:200])
            return
        if record is None or self.group not in (record.group, *record.groups):
            return
        self.registry.append(record)

    def latest(self) -> dict[str, InstanceRecord]:
        """The newest record of every worker of the group seen so far (gone ones left out)."""
        return dict(fold_all(self.registry).instances)


def pick_victim(latest: dict[str, InstanceRecord], topic: str) -> InstanceRecord | None:
    """The live worker on this host that owns the most partitions (the oldest on a tie)."""
    here = os.uname().nodename
    candidates = [
        r
        for r in latest.values()
        if r.state == "ready" and r.pid is not None and r.host in (None, here)
        if r.owned.get(topic)
    ]
    return max(
        candidates,
        key=lambda r: (len(r.owned.get(topic, ())), -r.started_at.timestamp()),
        default=None,
    )


def kill(pid: int) -> bool:
    """SIGKILL one worker process (one this run's stack started); False: it was gone."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    return True


@dataclass
class ProcessSamples:
    """Every `every_s`: how many workers run, and the CPU seconds of every process so far."""

    workers: list[tuple[float, int]] = field(default_factory=list)
    """(epoch s, worker processes running: consuming, starting or stopping)."""
    first_seen: dict[int, float] = field(default_factory=dict)
    """Worker pid -> when it was first seen running (epoch s)."""
    cpu: list[tuple[float, float, dict[str, float]]] = field(default_factory=list)
    """(epoch s, machine busy s, role -> CPU s of its processes so far)."""
    worker_cpu: dict[int, list[tuple[float, float]]] = field(default_factory=dict)
    """Worker pid -> (epoch s, CPU s so far)."""
    others: list[tuple[float, float, list[tuple[str, float]]]] = field(default_factory=list)
    """(epoch s, seconds covered, [(command, CPU s in them)]): the busiest processes that
    are not this run's, every `others_every_s` (what else the host ran)."""


async def sample_processes(
    samples: ProcessSamples,
    workers: Callable[[], list[int]],
    roles: Callable[[], dict[str, list[int]]],
    stop: asyncio.Event,
    *,
    every_s: float = 0.25,
    cpu_every_s: float = 1.0,
    others_every_s: float = 5.0,
) -> None:
    """Sample worker counts every `every_s`, CPU every `cpu_every_s` and the host's other
    busy processes every `others_every_s`, until `stop`."""
    last_cpu: dict[int, float] = {}
    others_before: dict[int, float] = {}
    others_at = time.time()
    next_others = others_at + others_every_s
    known: dict[str, set[int]] = {}
    """Every pid a role ever had: an exited process keeps its last CPU reading."""
    next_cpu = 0.0
    while not stop.is_set():
        now = time.time()
        pids = workers()
        samples.workers.append((now, len(pids)))
        for pid in pids:
            samples.first_seen.setdefault(pid, now)
        if now >= next_cpu:
            next_cpu = now + cpu_every_s
            per_role: dict[str, float] = {}
            for role, role_pids in roles().items():
                known.setdefault(role, set()).update(role_pids)
                total = 0.0
                for pid in sorted(known[role]):
                    cpu = process_cpu_total(pid) if pid in role_pids else None
                    if cpu is not None:
                        last_cpu[pid] = cpu
                    total += last_cpu.get(pid, 0.0)
                    if role == "workers" and cpu is not None:
                        samples.worker_cpu.setdefault(pid, []).append((now, last_cpu[pid]))
                per_role[role] = total
            samples.cpu.append((now, machine_busy_s(), per_role))
        if now >= next_others:
            ours = set().union(*known.values()) if known else set()
            now_cpu = _all_cpu(ours)
            busiest = sorted(
                (
                    (pid, used - others_before[pid])
                    for pid, used in now_cpu.items()
                    if pid in others_before and used > others_before[pid]
                ),
                key=lambda x: -x[1],
            )[:5]
            samples.others.append(
                (now, now - others_at, [(_command(pid), round(used, 2)) for pid, used in busiest])
            )
            others_before, others_at, next_others = now_cpu, now, now + others_every_s
        await wait_event(stop, every_s)


def _all_cpu(exclude: set[int]) -> dict[int, float]:
    """CPU s so far of every process on the host but `exclude` and this one."""
    out: dict[int, float] = {}
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        if pid in exclude or pid == me:
            continue
        cpu = process_cpu_total(pid)
        if cpu is not None:
            out[pid] = cpu
    return out


def _command(pid: int, width: int = 100) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return f"pid {pid} (gone)"
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()[:width] or f"pid {pid}"

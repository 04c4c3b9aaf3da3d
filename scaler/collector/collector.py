"""The collector: every few seconds, one `GroupSignals` per worker group, from broker reads."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol

from infra.models.config import ModelConfig
from infra.models.repository import ModelRepository
from infra.rollout.state import RolloutBook, effective
from infra.tasks import wait_event
from scaler.collector.feeds import TelemetryFeed
from scaler.collector.lag import EndBranch, PartitionLag, group_lag, summarize
from scaler.collector.load import group_load
from scaler.collector.offsets import GroupOffsetReader
from scaler.collector.rates import OffsetSample, oldest_age_s, rates, window
from scaler.registry import (
    Registry,
    newest_ready_at,
    ready_time,
    replicas_by_state,
    standby_replicas,
)
from scaler.rollout.lanes import lane_bounds
from scaler.signals import GroupSignals
from schemas.errors import InferbusError, ModelNotFound
from schemas.result import Status
from schemas.topics import Lane, Tier, parse_request_topic, request_topic, worker_group
from tracing.metrics import set_group_rates

log = logging.getLogger(__name__)


RETIRE_AFTER_S = 30.0
"""How long a group's model (or its tier) must be gone before the group retires."""


class CollectionError(InferbusError):
    """One group could not be collected this tick; the policy sees it as stale."""


@dataclass(frozen=True)
class CollectorConfig:
    """How often and how far back the collector looks; every field carries its unit."""

    interval_s: float = 5.0
    """Seconds between collections."""
    timeout_s: float = 5.0
    """Broker reads of one group give up after this many seconds."""
    rate_window_s: float = 15.0
    """Arrival and service rates are averaged over this many seconds of samples; the service
    uses it for the stage-latency window too. 15 s is the simulator's metrics window, which
    the policy is tuned against (30 s made a load step visible only half as fast)."""
    stuck_after_collections: int = 3
    """A partition whose commit has not moved for this many collections with lag is stuck."""
    heartbeat_max_age_s: float = 15.0
    """Heartbeats older than this do not count towards a group's load."""
    verify_end_offsets: bool = True
    """Read the last batch to correct brokers whose end offset is a batch base + 1 (Tansu)."""


@dataclass(frozen=True)
class StageP99:
    """p99 of the stages the policy weighs, in ms; None when not measured."""

    queue_ms: float | None = None
    engine_ms: float | None = None
    e2e_ms: float | None = None


class StageLatencies(Protocol):
    """Merged stage histograms over a sliding window (scaler/telemetry.py provides one)."""

    def p99s(self, model: str, tier: Tier, lane: Lane = "stable") -> StageP99:
        """Queue, engine and end-to-end p99 for one model, tier and lane."""
        ...


@dataclass(frozen=True)
class GroupTarget:
    """A worker group to collect: one model, tier and rollout lane."""

    model: str
    tier: Tier
    lane: Lane = "stable"

    @property
    def group(self) -> str:
        return worker_group(self.model, self.tier, self.lane)

    @property
    def topic(self) -> str:
        return request_topic(self.model, self.tier, self.lane)


def leftover_targets(
    topics: Iterable[str], wanted: Iterable[GroupTarget], models: Collection[str]
) -> list[GroupTarget]:
    """The groups of tier topics in `topics` that are not `wanted`: their model or its tier
    left the repository (`models`: the names in it) while no scaler ran. Collected, they
    retire, and what they left queued is answered. A canary lane's group only when its
    model is gone: one of a model still there would stay collected for good (a canary
    lane ends with its rollout, and retires only with its model or tier)."""
    groups = {t.group for t in wanted}
    out: list[GroupTarget] = []
    for name in sorted(topics):
        ref = parse_request_topic(name)
        if ref is None or (ref.lane == "canary" and ref.model in models):
            continue
        target = GroupTarget(ref.model, ref.tier, ref.lane)
        if target.group not in groups:
            out.append(target)
    return out


def targets_for(models: ModelRepository) -> list[GroupTarget]:
    """One target per model in the repository and tier its model.yaml serves, and one more
    per tier for a model whose model.yaml names a canary."""
    targets: list[GroupTarget] = []
    for name in models.names():
        config = models.config(name)
        lanes: list[Lane] = ["stable"]
        if config.rollout is not None and config.rollout.canary is not None:
            lanes.append("canary")
        targets.extend(GroupTarget(name, tier, lane) for lane in lanes for tier in config.tiers)
    return targets


@dataclass(frozen=True)
class GroupCollection:
    """One tick of one group: the signals (None before the first success) and the details."""

    group: str
    signals: GroupSignals | None
    failures: int
    """Consecutive failed collections; 0 after a success."""
    error: str | None = None
    partitions: Mapping[int, PartitionLag] = field(default_factory=dict)
    end_branches: Mapping[int, EndBranch] = field(default_factory=dict)
    retiring: str | None = None
    """Why the group's model no longer wants it (removed from the repository, or the tier
    from its model.yaml): its floor is 0, so its workers answer what is queued and go."""
    retired_answer: Status | None = None
    """How a retiring group's queue is answered once no worker is left for it:
    `model_not_found` (its model left the repository) or `invalid_input` (its tier left
    the model.yaml), what ingest answers a new request for either."""


@dataclass(frozen=True)
class Retiring:
    """Why a group retires, and the status its orphaned requests are answered with."""

    why: str
    answer: Status


@dataclass
class _Memory:
    """What the collector keeps about one group between ticks."""

    lags: dict[int, PartitionLag] = field(default_factory=dict)
    samples: tuple[OffsetSample, ...] = ()
    last: GroupSignals | None = None
    failures: int = 0


class Collector:
    """Reads offsets, the registry and telemetry, and yields `GroupSignals` per group.

    All I/O of the scaler's measurement side lives here; the arithmetic is in `lag`,
    `rates` and `load`, which are pure.
    """

    def __init__(
        self,
        bootstrap: str,
        targets: Sequence[GroupTarget],
        models: ModelRepository,
        *,
        registry: Registry,
        telemetry: TelemetryFeed,
        latencies: StageLatencies | None = None,
        rollouts: RolloutBook | None = None,
        config: CollectorConfig | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config or CollectorConfig()
        self._bootstrap = bootstrap
        self._models = models
        self._registry = registry
        self._telemetry = telemetry
        self._latencies = latencies
        self._rollouts = rollouts or RolloutBook()
        self._started = False
        self._clock = clock
        self._monotonic = monotonic
        self._targets = {t.group: t for t in targets}
        self._readers: dict[str, GroupOffsetReader] = {}
        self._memory: dict[str, _Memory] = {t.group: _Memory() for t in targets}
        self._retiring_said: set[str] = set()
        self._gone_since: dict[str, float] = {}
        """Per group its model no longer wants: since when (monotonic)."""
        self.failed_ticks = 0
        """Ticks whose collection or decision failed (the loop goes on)."""

    @property
    def groups(self) -> list[str]:
        return list(self._targets)

    def failures(self) -> dict[str, int]:
        """Consecutive failed collections per group."""
        return {g: m.failures for g, m in self._memory.items()}

    def target(self, group: str) -> GroupTarget:
        return self._targets[group]

    async def add_targets(self, targets: Sequence[GroupTarget]) -> list[str]:
        """Collect these groups too from now on (a model or a canary named while the scaler
        runs); returns the groups added. A group its model no longer wants is still
        collected (`GroupCollection.retiring`) until its workers drained and went; then its
        owner `drop`s it."""
        added = [t for t in targets if t.group not in self._targets]
        for target in added:
            self._retiring_said.discard(target.group)
            self._targets[target.group] = target
            self._memory[target.group] = _Memory()
        if added and self._started:
            await self.start()
        return [t.group for t in added]

    async def drop(self, group: str) -> None:
        """Stop collecting `group` (retired: its model no longer wants it, no worker left)."""
        self._targets.pop(group, None)
        self._memory.pop(group, None)
        self._retiring_said.discard(group)
        self._gone_since.pop(group, None)
        reader = self._readers.pop(group, None)
        if reader is not None:
            await reader.close()

    async def start(self) -> None:
        """Connect one offset reader per group (idempotent)."""
        self._started = True
        for group, target in self._targets.items():
            if group not in self._readers:
                reader = GroupOffsetReader(
                    self._bootstrap,
                    group,
                    target.topic,
                    timeout_s=self.config.timeout_s,
                    verify_end_offsets=self.config.verify_end_offsets,
                )
                await reader.start()
                self._readers[group] = reader

    async def close(self) -> None:
        """Disconnect every reader (idempotent)."""
        readers, self._readers = self._readers, {}
        for reader in readers.values():
            await reader.close()

    async def collect_all(self, current: Mapping[str, int] | None = None) -> list[GroupCollection]:
        """Collect every group at once; `current` is the actuator's replica count per group."""
        current = current or {}
        return list(await asyncio.gather(*(self.collect(g, current.get(g)) for g in self._targets)))

    async def collect(self, group: str, current: int | None = None) -> GroupCollection:
        """Collect one group; a failure is counted, logged and answered with stale signals."""
        memory = self._memory[group]
        target = self._targets[group]
        try:
            config, retiring = self._config(target)
            if retiring is not None and memory.last is None:
                # Never collected (no signals to go on): nothing of it to keep; what it
                # holds is not known (its owner sweeps it, `GroupCollection.retired_answer`).
                self._say_retiring(group, retiring.why)
                return GroupCollection(
                    group, None, 0, None, retiring=retiring.why, retired_answer=retiring.answer
                )
            signals, end_branches = await self._collect(target, memory, current, config)
        except Exception as exc:
            # Broker errors (aiokafka's KafkaError tree), timeouts and a bad model.yaml all
            # mean the same to the policy: this tick failed, count it and keep the last values.
            return self._failed(group, memory, exc)
        memory.failures, memory.last = 0, signals
        if retiring is None:
            return GroupCollection(group, signals, 0, None, dict(memory.lags), end_branches)
        self._say_retiring(group, retiring.why)
        return GroupCollection(
            group,
            signals,
            0,
            None,
            dict(memory.lags),
            end_branches,
            retiring=retiring.why,
            retired_answer=retiring.answer,
        )

    def _say_retiring(self, group: str, why: str) -> None:
        if group not in self._retiring_said:
            self._retiring_said.add(group)
            log.warning("event=group_retiring group=%s why=%r", group, why)

    def _config(self, target: GroupTarget) -> tuple[ModelConfig | None, Retiring | None]:
        """The model's config; or None, and why the repository no longer wants the group.

        Only once that has held for `RETIRE_AFTER_S`: until then the collection fails as
        before (the group holds), so a model folder being replaced, or a model.yaml being
        edited, does not stop its workers."""
        try:
            config = self._models.config(target.model)
        except ModelNotFound:
            gone = Retiring(
                f"model {target.model!r} is no longer in the repository", "model_not_found"
            )
        else:
            if target.tier in config.tiers:
                self._gone_since.pop(target.group, None)
                self._retiring_said.discard(target.group)
                return config, None
            gone = Retiring(
                f"model {target.model!r} no longer serves tier {target.tier!r}", "invalid_input"
            )
        now = self._monotonic()
        gone_for = now - self._gone_since.setdefault(target.group, now)
        if gone_for < RETIRE_AFTER_S:
            raise CollectionError(
                f"{gone.why} (for {gone_for:.0f} s; its group retires after "
                f"{RETIRE_AFTER_S:.0f} s)",
                group=target.group,
            )
        return None, gone

    def _failed(self, group: str, memory: _Memory, exc: BaseException) -> GroupCollection:
        memory.failures += 1
        log.warning(
            "event=collect_failed group=%s failures=%d error=%r", group, memory.failures, exc
        )
        stale = dataclasses.replace(memory.last, stale=True) if memory.last else None
        return GroupCollection(group, stale, memory.failures, repr(exc), dict(memory.lags))

    async def _collect(
        self,
        target: GroupTarget,
        memory: _Memory,
        current: int | None,
        config: ModelConfig | None,
    ) -> tuple[GroupSignals, dict[int, EndBranch]]:
        """One collection; `config` None: a retiring group (its last bounds, no floor)."""
        reader = self._readers.get(target.group)
        if reader is None and self._started:
            await self.start()  # a group added while its reader could not connect
            reader = self._readers.get(target.group)
        if reader is None:
            raise CollectionError("collector is not started", group=target.group)
        answer = await reader.read()
        if not answer.partitions:
            raise CollectionError(
                f"topic {target.topic} has no partitions", group=target.group, topic=target.topic
            )
        now_mono, now_wall = self._monotonic(), self._clock()

        memory.lags = group_lag(answer.offsets, memory.lags, self.config.stuck_after_collections)
        summary = summarize(memory.lags)
        fresh = [p for p in memory.lags.values() if not p.stale]
        sample = OffsetSample(
            now_mono,
            {p.partition: p.end for p in fresh if p.end is not None},
            {p.partition: p.position for p in fresh if p.position is not None},
        )
        memory.samples = window((*memory.samples, sample), self.config.rate_window_s)
        measured = rates(memory.samples)
        set_group_rates(target.group, measured.arrival_rps, measured.service_rps)

        behind = {p.partition: p.position for p in fresh if p.lag > 0 and p.position is not None}
        heads = await reader.head_timestamps(behind) if behind else {}
        oldest_s = oldest_age_s(int(now_wall * 1000), heads.values())
        if not behind:
            oldest_s = 0.0

        table = self._registry.table
        states = replicas_by_state(table, target.group)
        standby = standby_replicas(table, target.group)
        live = states["loading"] + states["warming"] + states["ready"] + states["draining"]
        # Started by the actuator, not yet registered (the actuator counts standbys too).
        spawned = max(0, (current or 0) - live - standby)
        ready = ready_time(table, target.group)
        joined_at = newest_ready_at(table, target.group)

        now_dt = datetime.fromtimestamp(now_wall, UTC)
        load = group_load(
            self._telemetry.heartbeats.values(),
            target.group,
            now_dt,
            self.config.heartbeat_max_age_s,
        )
        p99 = (
            self._latencies.p99s(target.model, target.tier, target.lane)
            if self._latencies
            else StageP99()
        )
        if config is None:  # retiring: the last bounds, with no floor
            assert memory.last is not None
            slo_ms, max_replicas = memory.last.slo_p99_e2e_ms, memory.last.max_replicas
            min_replicas = warm_replicas = 0
        else:
            slo_ms = config.slo_for(target.tier).p99_e2e_ms
            share = effective(config.rollout, self._rollouts.get(target.model)).share
            min_replicas, max_replicas, warm_replicas = lane_bounds(
                config.replicas, target.lane, share
            )
        signals = GroupSignals(
            group=target.group,
            model=target.model,
            tier=target.tier,
            replicas=live + spawned,
            ready_replicas=states["ready"],
            partitions=len(answer.partitions),
            slo_p99_e2e_ms=slo_ms,
            collected_at=now_wall,
            starting_replicas=states["loading"] + states["warming"] + spawned,
            arrival_rps=measured.arrival_rps,
            service_rps_per_replica=load.service_rps_per_replica,
            achieved_batch_size=load.achieved_batch_size,
            lag=summary.total,
            oldest_age_ms=None if oldest_s is None else oldest_s * 1000.0,
            queue_p99_ms=p99.queue_ms,
            engine_p99_ms=p99.engine_ms,
            e2e_p99_ms=p99.e2e_ms,
            utilization=load.utilization,
            time_to_ready_s=ready.median_s if ready else None,
            newest_ready_at=joined_at,
            min_replicas=min_replicas,
            max_replicas=max_replicas,
            warm_replicas=warm_replicas,
            stale=summary.stale > 0,
            standby_replicas=standby,
            standby_ready_replicas=standby,
        )
        if summary.stuck or summary.stale:
            log.info(
                "event=lag_edge group=%s stuck=%s stale=%d branches=%s",
                target.group,
                list(summary.stuck),
                summary.stale,
                dict(summary.branches),
            )
        return signals, dict(answer.end_branches)

    async def run(
        self,
        on_tick: Callable[[list[GroupCollection]], Awaitable[None]],
        stop: asyncio.Event,
        current: Callable[[], Awaitable[Mapping[str, int]]] | None = None,
    ) -> None:
        """Collect every `interval_s` until `stop` is set, handing each tick to `on_tick`."""
        while not stop.is_set():
            started = self._monotonic()
            try:
                counts = await current() if current else None
                await on_tick(await self.collect_all(counts))
            except Exception as exc:  # a tick that fails (broker away) must not end the loop
                self.failed_ticks += 1
                log.error(
                    "event=scaler_tick_failed error=%r (next tick in %.1fs)",
                    exc,
                    self.config.interval_s,
                )
            self._telemetry.prune(
                datetime.fromtimestamp(self._clock(), UTC), 10 * self.config.heartbeat_max_age_s
            )
            left = self.config.interval_s - (self._monotonic() - started)
            if left > 0:
                await wait_event(stop, left)

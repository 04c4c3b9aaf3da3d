"""The scaler's loop: collect signals, judge canaries, decide with a policy, actuate, publish
every decision (an idle group's unchanged hold every 25 s)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from infra.feed import feed_wait_ms
from infra.kafka import make_producer, start_with_retry
from infra.models.repository import ModelRepository
from infra.rollout.feed import RolloutFeed
from infra.rollout.publish import publish_rollout
from infra.rollout.state import RolloutBook, effective
from infra.tasks import wait_event
from infra.topics import topic_names
from scaler.actuators.base import Actuator, ActuatorError
from scaler.actuators.decisions import Written, publish_decision, what_it_says, worth_writing
from scaler.checkpoint import (
    CHECKPOINT_EVERY_S,
    CHECKPOINT_RETRY_S,
    checkpoint_due,
    config_digest,
    tick_checkpoints,
)
from scaler.collector.collector import (
    Collector,
    CollectorConfig,
    GroupCollection,
    GroupTarget,
    leftover_targets,
    targets_for,
)
from scaler.collector.feeds import TelemetryFeed
from scaler.collector.latency import WindowLatencies
from scaler.config import PolicyConfig
from scaler.decision import GroupDecision
from scaler.orphan_sweeps import OrphanSweeps
from scaler.policy import POLICIES
from scaler.policy.retire import settle_retiring
from scaler.recall import Recall, recall, replay_span_s, to_resume
from scaler.recall_reader import read_decisions
from scaler.registry import Registry, groups_with_live_members
from scaler.rollout.judge import RolloutJudge
from scaler.rollout.lanes import settle_canary
from scaler.rollout.windows import VersionWindows
from scaler.settings import IDLE_HOLD_EVERY_MAX_S, IDLE_HOLD_EVERY_S, RECALL_TIMEOUT_S
from scaler.signals import GroupSignals, ScalerState
from scaler.telemetry import TelemetryReader
from schemas.errors import InferbusError
from schemas.rollout import RolloutRecord
from schemas.topics import Tier
from services.runtime.publisher import Publisher
from tracing.metrics import (
    mark_scale_decision,
    set_desired_replicas,
    set_group_lag,
    set_group_p99,
    set_oldest_age,
    set_replicas,
    set_slo,
)

log = logging.getLogger(__name__)

REGISTRY_WAIT_S = 5.0
"""How long a starting scaler waits for the instance registry before it looks for leftover
groups with live workers (a registry behind finds fewer; they are said)."""
LEFTOVERS_NAMED = 10
"""Leftover groups a start's log line names (the rest are counted)."""


@dataclass(frozen=True)
class GroupView:
    """What the live view shows of one group after a tick."""

    collection: GroupCollection
    decision: GroupDecision | None
    applied: bool
    error: str | None


class ScalerService:
    """Runs every `interval_s`: collect → decide (pure) → scale → publish."""

    def __init__(
        self,
        bootstrap: str,
        models_dir: Path,
        actuator: Actuator,
        *,
        policy: str = "slo",
        config: PolicyConfig | None = None,
        collector_config: CollectorConfig | None = None,
        act: bool = True,
        tiers: Sequence[Tier] | None = None,
        idle_hold_every_s: float = IDLE_HOLD_EVERY_S,
        sweeps: OrphanSweeps | None = None,
        recall_timeout_s: float = RECALL_TIMEOUT_S,
    ) -> None:
        if policy not in POLICIES:
            raise ValueError(f"unknown policy {policy!r}; choose from {', '.join(POLICIES)}")
        self.bootstrap = bootstrap
        self.policy_name = policy
        self.policy = POLICIES[policy]
        self.config = config or PolicyConfig()
        self.actuator = actuator
        self.act = act
        self.models = ModelRepository(models_dir)
        collector_config = collector_config or CollectorConfig()
        # p99s over the same window as the rates (the simulator's metrics window): the reader's
        # 60 s default kept a drained spike's queue p99 in the signals for a minute.
        self.reader = TelemetryReader(window_s=collector_config.rate_window_s)
        self.versions = VersionWindows()
        feed_wait = feed_wait_ms(collector_config.interval_s)
        self.registry = Registry(bootstrap, poll_timeout_ms=feed_wait)
        self.feed = TelemetryFeed(
            bootstrap, sinks=[self.reader.apply, self.versions.apply], poll_timeout_ms=feed_wait
        )
        self.rollouts = RolloutBook()
        self.rollout_feed = RolloutFeed(bootstrap, self.rollouts, poll_timeout_ms=feed_wait)
        self.tiers = tiers
        self.collector = Collector(
            bootstrap,
            self._targets(),
            self.models,
            registry=self.registry,
            telemetry=self.feed,
            latencies=WindowLatencies(self.reader.windows, self.reader.lanes),
            rollouts=self.rollouts,
            config=collector_config,
        )
        self.judge = RolloutJudge(self.models, self.rollouts, self.versions, self._publish_rollout)
        self._target_problem: str | None = None
        self._no_share_since: dict[str, float] = {}
        """Per model with canary groups: when the scaler first saw its canary share at 0."""
        self.state = ScalerState()
        self.views: dict[str, GroupView] = {}
        self.ticks = 0
        self.idle_hold_every_s = idle_hold_every_s
        self.recall_timeout_s = recall_timeout_s
        self.recalled: Recall | None = None
        """What the start read back of the decision records (None: not read)."""
        self._written: dict[str, Written] = {}
        """Per group: what its last decision record said, and when (`worth_writing`)."""
        self._checkpoint_at: float | None = None
        """When the decision records last carried the memory (`scaler/checkpoint.py`)."""
        self._checkpoint_skip_said_at: float | None = None
        self._producer: AIOKafkaProducer | None = None
        self.sweeps = sweeps or OrphanSweeps(bootstrap)
        """Answer what retiring groups with no worker left hold (`_drop_if_retired`)."""
        self._zeroed: set[str] = set()
        """Retiring groups scaled to 0 before their first sweep (once a retirement)."""

    async def start(self) -> None:
        """Connect the registry, telemetry, collector and decision producer."""
        await self.registry.start()
        await self.feed.start()
        await self.rollout_feed.start()
        await self.collector.start()
        self._producer = make_producer(self.bootstrap, client_id="inferbus-scaler")
        await start_with_retry(self._producer.start, what="scaler-producer")
        self.sweeps.bind(Publisher(self._producer))
        await self._recall()
        await self._adopt_leftovers()

    async def _recall(self) -> None:
        """Rebuild the policy's memory from the decision records of the last half hour (and
        a quarter hour before it, `replay_span_s`).

        Before the first tick: the first decision is then made with the bursts, schedule
        and spare the scaler before this one had learned. Whatever fails here (the broker
        away, a record the policy fails on) is logged and the scaler starts with no memory,
        as it did before recall: a restart must not depend on the log it reads.
        """
        if self.recall_timeout_s <= 0:
            log.info("event=recall_off")
            return
        now = time.time()
        span_s = replay_span_s(self.config)
        since = now - span_s
        groups = list(self.collector.groups)
        interval_s = self.collector.config.interval_s
        # Two records an interval per group: a tick's, and one more of another scaler's.
        most = math.ceil(2 * span_s / interval_s) * max(1, len(groups))
        try:
            read = await read_decisions(
                self.bootstrap, since=since, most=most, timeout_s=self.recall_timeout_s
            )
            # 45 minutes of six groups replay in about two seconds: off the event loop,
            # where the registry and telemetry feeds are already reading.
            self.recalled = await asyncio.to_thread(
                recall,
                read.records,
                self.policy,
                self.config,
                since=since,
                until=now,
                interval_s=interval_s,
                idle_every_s=IDLE_HOLD_EVERY_MAX_S,
                acting=self.act,
                groups=groups,
                policy_name=self.policy_name,
            )
        except Exception as exc:  # said here; the scaler runs on without the memory
            log.warning("event=recall_failed error=%r starting=without_memory", exc)
            return
        self.state = to_resume(self.recalled.state)
        start = self.recalled.from_checkpoint
        log.info(
            "event=recalled read=%d ticks=%d since_s_ago=%s checkpoint_s_ago=%s complete=%s "
            "skipped=%s checkpoints_unusable=%s dropped=%s",
            self.recalled.read,
            self.recalled.ticks,
            None if self.recalled.since is None else round(now - self.recalled.since),
            None if start is None else round(now - start),
            read.complete,
            dict(self.recalled.skipped),
            dict(self.recalled.checkpoint_problems),
            ",".join(self.recalled.dropped) or None,
        )

    async def _adopt_leftovers(self) -> None:
        """Collect the groups of tier topics no model wants any more that still hold
        requests or have live workers (their model or tier removed while no scaler ran, or
        a scaler stopped while it retired them): they retire in `RETIRE_AFTER_S`, their
        workers stop once what is queued is answered, and what no worker answers is
        (`_drop_if_retired`). A failure is said; the scaler runs on without them. A dry
        run (not acting) retires nothing, so adopts nothing."""
        if not self.act:
            return
        if not self.models.root.is_dir():
            # Not mounted yet, or a wrong path: every group would look unwanted.
            log.warning("event=leftovers_skipped models=%s (not a folder)", self.models.root)
            return
        if not await wait_event(self.registry.caught_up, REGISTRY_WAIT_S):
            log.warning("event=leftovers_registry_behind waited_s=%.0f", REGISTRY_WAIT_S)
        live = groups_with_live_members(self.registry.table, datetime.now(UTC))
        try:
            names = await topic_names(self.bootstrap)
            wanted = self._targets()
            leftovers = [
                t
                for t in leftover_targets(names, wanted, self.models.names())
                if self.tiers is None or t.tier in self.tiers
            ]
            counts = await asyncio.gather(
                *(self.sweeps.unanswered(t.group, t.topic) for t in leftovers),
                return_exceptions=True,
            )
            adopted: dict[GroupTarget, int] = {}
            for target, counted in zip(leftovers, counts, strict=True):
                unread = isinstance(counted, BaseException)
                if unread:
                    # Adopted all the same: left out, what it may hold would wait for the
                    # next scaler to start. A sweep that finds nothing drops it again.
                    log.warning(
                        "event=leftover_unread group=%s error=%r (adopted)", target.group, counted
                    )
                count = counted if isinstance(counted, int) else 0
                if count or unread or target.group in live:
                    adopted[target] = count
            if adopted:
                await self.collector.add_targets(list(adopted))
        except (InferbusError, KafkaError, OSError) as exc:
            log.warning("event=leftovers_unread error=%r", exc)
            return
        if adopted:
            named = ",".join(t.group for t in list(adopted)[:LEFTOVERS_NAMED])
            more = len(adopted) - LEFTOVERS_NAMED
            log.warning(
                "event=leftover_groups count=%d queued=%d with_workers=%d groups=%s%s (no "
                "model wants them: they retire, and their requests are answered)",
                len(adopted),
                sum(adopted.values()),
                sum(1 for t in adopted if t.group in live),
                named,
                f" and {more} more" if more > 0 else "",
            )

    async def close(self) -> None:
        """Disconnect (the actuator is closed by its owner); what a retired group still
        holds unanswered is found and answered by the next scaler to start."""
        await self.sweeps.close()
        await self.collector.close()
        await self.feed.close()
        await self.rollout_feed.close()
        await self.registry.close()
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None

    def _targets(self) -> list[GroupTarget]:
        return [t for t in targets_for(self.models) if self.tiers is None or t.tier in self.tiers]

    async def _publish_rollout(self, record: RolloutRecord) -> None:
        if self._producer is None:
            raise RuntimeError("the scaler is not started")
        await publish_rollout(self._producer, record)

    async def _add_new_groups(self) -> None:
        """A canary named in model.yaml since the last tick gets its groups collected."""
        try:
            targets = self._targets()
        except InferbusError as exc:  # the collector reports the model's groups as failing
            if str(exc) != self._target_problem:
                log.warning("event=targets_unreadable error=%s", exc)
            self._target_problem = str(exc)
            return
        self._target_problem = None
        added = await self.collector.add_targets(targets)
        if added:
            log.info("event=groups_added groups=%s", ",".join(added))

    def _canary_share(self, model: str, now: float) -> tuple[float, float]:
        """The canary's share in force, and for how long it has been 0 (seconds)."""
        try:
            config = self.models.config(model)
        except InferbusError:
            share = 1.0  # unknown: never retire on it (the collector reports the model)
        else:
            share = effective(config.rollout, self.rollouts.get(model)).share
        if share > 0:
            self._no_share_since.pop(model, None)
            return share, 0.0
        return share, now - self._no_share_since.setdefault(model, now)

    def readiness(self) -> tuple[bool, str]:
        """(ready, why) for `/readyz`: connected and deciding."""
        if self._producer is None:
            return False, "starting"
        if self.ticks == 0:
            return False, "no decision yet"
        return True, f"{self.ticks} ticks, {self.collector.failed_ticks} failed"

    async def current(self) -> Mapping[str, int]:
        """Replicas per group, as the actuator sees them."""
        return {group: await self.actuator.current(group) for group in self.collector.groups}

    async def on_tick(self, collections: list[GroupCollection]) -> None:
        """Decide and act on one collection of every group."""
        self.ticks += 1
        await self.judge.tick()
        signals: list[GroupSignals] = [c.signals for c in collections if c.signals is not None]
        decisions: dict[str, GroupDecision] = {}
        tick_at = time.time()
        if signals:
            decision, self.state = self.policy(signals, self.state, self.config, tick_at)
            decisions = {d.group: d for d in decision.groups}
        checkpoints = self._checkpoints(collections, signals, tick_at)
        written = True
        for collection in collections:
            chosen = decisions.get(collection.group)
            target = self.collector.target(collection.group)
            if collection.retiring is None and collection.error is None:
                # Its model or tier is back (a failed collection says nothing of that):
                # the sweep stops before any worker starts.
                await self.sweeps.stop(collection.group, "its model wants it again")
                self._zeroed.discard(collection.group)
            if chosen is not None and target.lane == "canary":
                share, no_share_for_s = self._canary_share(target.model, time.time())
                chosen = settle_canary(
                    chosen, collection.signals, target.lane, share, no_share_for_s=no_share_for_s
                )
            if collection.retiring is not None:
                if chosen is None:  # never collected: no decision of the policy's to bound
                    chosen = GroupDecision(
                        group=collection.group,
                        model=target.model,
                        tier=target.tier,
                        current=await self.actuator.current(collection.group),
                        desired=0,
                        diagnosis="idle",
                    )
                chosen = settle_retiring(chosen, collection.signals, collection.retiring)
            applied, error = False, None
            processes = chosen.desired + chosen.standby if chosen is not None else 0
            if (
                chosen is not None
                and self.act
                and processes != await self.actuator.current(chosen.group)
            ):
                # The actuator keeps consumers and warm standbys; the workers read `desired`
                # from the decision to know how many of them consume.
                try:
                    await self.actuator.scale(chosen.group, processes, chosen.line())
                    applied = True
                except Exception as exc:  # reported in the decision record and the view
                    error = repr(exc)
                    log.error("event=scale_failed group=%s error=%r", chosen.group, exc)
            if chosen is not None and self._producer is not None:
                written &= await self._publish(
                    chosen,
                    collection,
                    applied=applied,
                    error=error,
                    tick_at=tick_at,
                    checkpoint=None if checkpoints is None else checkpoints[chosen.group],
                )
            self.views[collection.group] = GroupView(collection, chosen, applied, error)
            self._export(collection, chosen)
            if collection.retiring is not None:
                await self._drop_if_retired(collection)
        if checkpoints is not None:
            # One that could not be written is tried again at the first tick
            # CHECKPOINT_RETRY_S later, not every tick: each forces every group's record.
            retry_at = tick_at - CHECKPOINT_EVERY_S + CHECKPOINT_RETRY_S
            self._checkpoint_at = tick_at if written else retry_at
        await self._add_new_groups()

    def _checkpoints(
        self, collections: Sequence[GroupCollection], signals: Sequence[GroupSignals], now: float
    ) -> dict[str, dict[str, Any]] | None:
        """The memory to write beside this tick's decisions, where one is due and every
        group's can be started from (`scaler/checkpoint.py`). Not while a group retires (it
        may leave the memory during the tick) or without a producer (a decide-only run).
        Why one is due but not written is said once a checkpoint interval."""
        if self._producer is None or not checkpoint_due(now, self._checkpoint_at):
            return None
        retiring = sorted(c.group for c in collections if c.retiring is not None)
        if retiring:
            got: dict[str, dict[str, Any]] | str = f"retiring: {','.join(retiring)}"
        else:
            got = tick_checkpoints(
                self.state, signals, policy=self.policy_name, config=config_digest(self.config)
            )
        if isinstance(got, str):
            if checkpoint_due(now, self._checkpoint_skip_said_at):
                log.info("event=checkpoint_skipped why=%r", got)
                self._checkpoint_skip_said_at = now
            return None
        return got

    async def _drop_if_retired(self, collection: GroupCollection) -> None:
        """A retiring group with no worker left is no longer collected or decided, once
        what it holds is answered: a sweep answers each request with an error result
        (`OrphanSweeps`) until its lag reads 0, or, never collected (its lag unknown),
        until a sweep found nothing. A dry run answers nothing and drops it at once."""
        s, group = collection.signals, collection.group
        if s is not None and s.stale:
            return
        registered = group in groups_with_live_members(self.registry.table, datetime.now(UTC))
        if (s is not None and s.replicas != 0) or registered or await self.actuator.current(group):
            # A worker answers what is queued (a draining one too: the registry knows it
            # where the signals of a never-collected group do not); it and a sweep must not
            # both commit.
            await self.sweeps.stop(group, "a worker is live")
            return
        queued = None if s is None or s.lag is None else s.lag
        if self.act and queued != 0 and not (queued is None and self.sweeps.found_nothing(group)):
            if group not in self._zeroed:
                # Its count may still be wanted where none runs (a worker in a crash loop,
                # its restart backed off): the actuator would start it under the sweep.
                await self._scale_to_zero(group, collection.retiring)
                self._zeroed.add(group)
            self.sweeps.ensure(
                group,
                topic=self.collector.target(group).topic,
                status=collection.retired_answer or "model_not_found",
                why=collection.retiring or "its group retires",
                queued=queued,
            )
            return
        await self.sweeps.stop(group, "the group is dropped")
        if self.act:
            await self._scale_to_zero(group, collection.retiring)
        elif queued:
            log.warning(
                "event=group_retired_unanswered group=%s queued=%d (a dry run answers nothing)",
                group,
                queued,
            )
        self._zeroed.discard(group)
        await self.collector.drop(group)
        self.views.pop(group, None)
        self._written.pop(group, None)
        self.state = dataclasses.replace(
            self.state, groups=tuple(g for g in self.state.groups if g.group != group)
        )
        log.info("event=group_retired group=%s why=%r", group, collection.retiring)

    async def _scale_to_zero(self, group: str, why: str | None) -> None:
        """Tell the actuator no worker of a retired group is wanted; a refusal (its
        Deployment or service already gone) is said, and the retirement goes on."""
        try:
            await self.actuator.scale(group, 0, f"retired: {why}")
        except ActuatorError as exc:  # said; a missing deployment wants no worker either
            log.warning("event=retired_scale_failed group=%s error=%s", group, exc)

    async def _publish(
        self,
        chosen: GroupDecision,
        collection: GroupCollection,
        *,
        applied: bool,
        error: str | None,
        tick_at: float,
        checkpoint: dict[str, Any] | None = None,
    ) -> bool:
        """The decision record; one that cannot be written (broker away) is logged and
        the next tick writes a fresh one (False). What is left out is judged by when records
        are written: a starting worker reads the last 30 s of them by that time. A record
        with the group's memory (`checkpoint`) is always written."""
        assert self._producer is not None
        now = time.time()
        said = what_it_says(chosen, applied=applied, error=error, acting=self.act)
        last = self._written.get(chosen.group)
        signals = collection.signals
        if checkpoint is None and not worth_writing(
            said, signals, last, now=now, idle_every_s=self.idle_hold_every_s
        ):
            return True
        try:
            await publish_decision(
                self._producer,
                chosen,
                policy=self.policy_name,
                at=now,
                tick_at=tick_at,
                signals=signals,
                applied=applied,
                error=error,
                acting=self.act,
                checkpoint=checkpoint,
            )
        except KafkaError as exc:
            log.warning("event=decision_publish_failed group=%s error=%r", chosen.group, exc)
            return False
        self._written[chosen.group] = Written(said, now, signals)
        return True

    @staticmethod
    def _export(collection: GroupCollection, decision: GroupDecision | None) -> None:
        signals = collection.signals
        if signals is not None:
            if signals.lag is not None:
                set_group_lag(collection.group, signals.lag)
            set_replicas(collection.group, "ready", signals.ready_replicas)
            set_replicas(collection.group, "starting", signals.starting_replicas)
            set_oldest_age(collection.group, signals.oldest_age_ms)
            set_slo(collection.group, signals.slo_p99_e2e_ms)
            for part, ms in (
                ("queue", signals.queue_p99_ms),
                ("engine", signals.engine_p99_ms),
                ("e2e", signals.e2e_p99_ms),
            ):
                set_group_p99(collection.group, part, ms)
        if decision is not None:
            set_desired_replicas(collection.group, decision.desired)
            mark_scale_decision(
                decision.group, decision.current, decision.desired, decision.diagnosis, time.time()
            )

    async def run(self, stop: asyncio.Event) -> None:
        """Tick until `stop` is set."""
        await self.collector.run(self.on_tick, stop, current=self.current)

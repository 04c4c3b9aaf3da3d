"""The worker's life: load and warm the engine, register ready, take partitions, serve, drain.

One process, one engine session, one consumer per served tier (a batch backlog never sits
in front of an interactive fetch). The hot path is `pipeline.Pipeline`; the engine and its
version reloads are `engine_host.EngineHost`; partition ownership and the registry are the
shared `services.runtime` machinery. A worker serves one rollout lane: its topics, its
groups, and the version the rollout in force names for it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from typing import Any

from aiokafka.structs import RecordMetadata

from infra.kafka import make_producer, start_with_retry
from infra.models.repository import ModelRepository
from infra.processes import StopDeadline, process_started_at
from infra.tasks import cancel_and_wait, say_failure
from schemas.errors import InferbusError
from schemas.result import STATUSES
from schemas.telemetry import WorkerLoad
from schemas.topics import TIERS, Tier, request_topic, worker_group
from services.runtime.consumer import ConsumerOptions, OwnedConsumer
from services.runtime.membership import Identity, Membership, default_instance_id
from services.runtime.offsets import OffsetTracker
from services.runtime.publisher import Publisher
from services.worker.batching import Batcher, BatchPolicy
from services.worker.engine_host import EngineFactory, EngineHost, default_engine_factory
from services.worker.inhand import InHand
from services.worker.pipeline import Pipeline
from services.worker.settings import NOTICE_S, STOP_AFTER_DRAIN_S, WorkerSettings
from services.worker.versions import LaneVersions
from tracing.health import HEALTH
from tracing.metrics import set_worker_version, start_metrics_server
from tracing.setup import init_tracing, shutdown_tracing
from tracing.telemetry import TelemetryPublisher

log = logging.getLogger(__name__)
PROCESS_STARTED = process_started_at()
"""Time-to-ready counts from here: the process's start, its imports included."""


class WorkerFailed(InferbusError):
    """The worker could not start or serve."""


class Worker:
    """One engine session serving one model on one or more tiers."""

    def __init__(
        self,
        bootstrap: str,
        settings: WorkerSettings | None = None,
        *,
        engine_factory: EngineFactory = default_engine_factory,
    ) -> None:
        self.settings = settings or WorkerSettings()
        self.bootstrap = bootstrap
        self.tiers: list[Tier] = [t for t in TIERS if t in self.settings.tiers]
        self.lane = self.settings.lane
        self.instance_id = self.settings.instance_id or default_instance_id(
            f"worker-{self.settings.model}"
        )
        repository = ModelRepository(self.settings.models_dir)
        self.host = EngineHost(
            repository,
            self.settings.model,
            pinned_version=self.settings.model_version,
            wanted=lambda: self.versions.wanted(self._served()),
            engine_factory=engine_factory,
        )
        self.producer = make_producer(bootstrap, client_id=self.instance_id)
        self.offsets = OffsetTracker()
        self.groups = {
            tier: worker_group(self.settings.model, tier, self.lane) for tier in self.tiers
        }
        self.topics = {
            tier: request_topic(self.settings.model, tier, self.lane) for tier in self.tiers
        }
        self.membership = Membership(
            self._send_and_wait,
            Identity(
                instance_id=self.instance_id,
                service="inferbus-worker",
                model=self.settings.model,
                tiers=self.tiers,
                groups=[self.groups[tier] for tier in self.tiers],
                started_at=datetime.fromtimestamp(PROCESS_STARTED, UTC),
            ),
            lease_s=self.settings.lease_s,
            details=self._details,
        )
        self.versions = LaneVersions(
            repository,
            self.settings.model,
            self.lane,
            pinned=self.settings.model_version,
            rollouts=self.membership.rollouts,
        )
        self.ready = asyncio.Event()
        self.stopped = asyncio.Event()
        self.pipeline: Pipeline | None = None
        self.consumers: dict[Tier, OwnedConsumer] = {}
        self._time_to_ready_s: float | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._telemetry: TelemetryPublisher | None = None
        self._stop_requested = asyncio.Event()
        self._started = False
        self._producer_up = False
        """The producer reached the broker: the registry can be told of a stop."""
        self._draining = False
        self._reported: Counter[str] = Counter()

    @property
    def counts(self) -> dict[str, int]:
        return dict(self.pipeline.counts) if self.pipeline else {}

    def _details(self) -> dict[str, Any]:
        version, engine = self.host.version, self.host.engine
        return {
            "model_version": version.version if version else None,
            "provider": engine.info.provider if engine else None,
            "simulated": engine.info.simulated if engine else False,
            "load_s": self.host.load_s,
            "warmup_s": self.host.warmup_s,
            "time_to_ready_s": self._time_to_ready_s,
            "standby": bool(self.consumers)
            and not any(self.consumers[t].owned(self.topics[t]) for t in self.tiers),
        }

    # ---- the version this worker serves ------------------------------------------------

    def _served(self) -> str | None:
        return self.host.version.version if self.host.version else None

    async def _load(self) -> None:
        """Load and warm the version to serve; a version that cannot be served is refused
        with the setting that named it."""
        self.versions.require()
        setting = self.versions.setting()
        try:
            await self.host.load(on_warming=lambda: self.membership.publish("warming"))
        except InferbusError as exc:
            if setting is None:
                raise
            raise WorkerFailed(
                f"{setting} of model {self.settings.model!r}: version "
                f"{self.host.target()!r} cannot be served: {exc}",
                model=self.settings.model,
                lane=self.lane,
            ) from exc

    async def _switched(self) -> None:
        """After a version switch: the registry and /metrics say the new version."""
        if self.host.version is not None:
            set_worker_version(self.settings.model, self.lane, self.host.version.version)
        await self.membership.publish()

    def _load_with_results(self, snapshot: WorkerLoad) -> WorkerLoad:
        """The load snapshot plus the results sent since the last one, by status."""
        counts = self.pipeline.counts if self.pipeline else Counter[str]()
        results = {
            s: counts[s] - self._reported[s] for s in STATUSES if counts[s] > self._reported[s]
        }
        self._reported = Counter({s: counts[s] for s in STATUSES})
        return snapshot.model_copy(update={"results": results})

    async def _send_and_wait(self, topic: str, key: bytes, value: bytes) -> RecordMetadata:
        return await self.producer.send_and_wait(topic, value, key=key)

    # ---- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        """Load, warm up, register ready, then take partitions and serve. Idempotent."""
        if self._started:
            return
        self._started = True
        await start_with_retry(self.producer.start, what="producer")
        self._producer_up = True
        await self.membership.publish("loading")
        try:
            await self._load()
        except InferbusError:
            await self.membership.publish("gone")
            raise
        version = self.host.version
        assert version is not None
        set_worker_version(self.settings.model, self.lane, version.version)
        batching = version.config.batching
        self.pipeline = Pipeline(
            settings=self.settings,
            instance_id=self.instance_id,
            host=self.host,
            batcher=Batcher[InHand](
                BatchPolicy(
                    max_batch_size=batching.max_batch_size,
                    max_queue_delay_s=batching.max_queue_delay_ms / 1000,
                    preferred_batch_sizes=tuple(batching.preferred_batch_sizes),
                    length_buckets=tuple(batching.length_buckets),
                    starvation_s=self.settings.starvation_ms / 1000,
                )
            ),
            publisher=Publisher(self.producer, patience_s=self.settings.publish_patience_s),
            offsets=self.offsets,
            groups=self.groups,
            lease_lapsed=self.membership.lease_lapsed,
        )
        self._time_to_ready_s = time.time() - PROCESS_STARTED
        await self.membership.publish("ready")
        self.membership.start_refresh()
        for rank, tier in enumerate(self.tiers):
            consumer = OwnedConsumer(
                self.bootstrap,
                client_id=self.instance_id,
                membership=self.membership,
                groups=[(self.groups[tier], self.topics[tier])],
                offsets=self.offsets,
                drain=self.pipeline.drain,
                let_go=self.pipeline.let_go,
                control=rank == 0,
                options=ConsumerOptions(
                    batch_lane=tier == "batch",
                    critical=tier == "critical",
                    max_poll_records=self.settings.poll_max_records,
                ),
            )
            self.consumers[tier] = consumer  # before start: a cancelled start still closes it
            await consumer.start()
        pipeline = self.pipeline
        self._tasks = [
            asyncio.create_task(pipeline.poll_loop(tier, consumer), name=f"poll-{tier}")
            for tier, consumer in self.consumers.items()
        ]
        self._tasks.append(asyncio.create_task(pipeline.engine_loop(), name="engine"))
        self._tasks.append(
            asyncio.create_task(
                self.host.reload_loop(self.settings.reload_check_s, self._switched),
                name="reload",
            )
        )
        for task in self._tasks:
            say_failure(task, log)
        self._telemetry = TelemetryPublisher(
            self._send_telemetry,
            instance_id=self.instance_id,
            service="inferbus-worker",
            model=self.settings.model,
            tiers=self.tiers,
            lane=self.lane,
            model_version=self._served,
            interval_s=self.settings.heartbeat_interval_s,
            load_provider=lambda: self._load_with_results(pipeline.load_snapshot()),
        )
        self._telemetry.start()
        self.ready.set()
        log.info(
            "event=worker_ready instance=%s model=%s lane=%s version=%s tiers=%s provider=%s",
            self.instance_id,
            self.settings.model,
            self.lane,
            version.version,
            ",".join(self.tiers),
            self.host.engine.info.label if self.host.engine else None,
        )

    async def _send_telemetry(self, topic: str, key: bytes, value: bytes) -> None:
        await self.producer.send_and_wait(topic, value, key=key)

    async def run(self) -> None:
        """Start, then serve until SIGTERM/SIGINT (a second signal exits at once).

        A signal during start-up (loading, warming) cancels the start and deregisters; it
        never leaves a half-started consumer behind.
        """
        loop = asyncio.get_running_loop()
        stop_requested = self._stop_requested
        signals = 0

        def on_signal() -> None:
            nonlocal signals
            signals += 1
            if signals == 1:
                log.info("event=drain_requested instance=%s", self.instance_id)
                stop_requested.set()
            else:
                log.warning("event=second_signal exit=now")
                os._exit(1)

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal)
        starting = asyncio.create_task(self.start(), name="start")
        stopping = asyncio.create_task(stop_requested.wait(), name="stop-requested")
        try:
            await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if not starting.done():
                await cancel_and_wait(starting)
                log.info("event=start_cancelled instance=%s", self.instance_id)
            else:
                starting.result()  # a failed start (bad model, broker down) raises here
                await stopping
        finally:
            stopping.cancel()
            await self.stop()

    def readiness(self) -> tuple[bool, str]:
        """(ready, why) for `/readyz`: engine loaded and warm, registered ready, lease fresh.
        A warm standby is ready (it serves the moment the scaler says so)."""
        state = self.membership.state
        if state != "ready":
            return False, f"state {state}"
        if self.membership.lease_lapsed():
            return False, "registry lease lapsed (broker unreachable?)"
        return True, "ready"

    async def stop(self) -> None:
        """Stop polling, answer what is in hand, commit, release, deregister. Idempotent.

        Bounded: the draining notice gets `NOTICE_S`, the in-hand work `drain_timeout_s`;
        what waits on the broker after the drain shares `STOP_AFTER_DRAIN_S` (the registry's
        gone notice and the last heartbeat `NOTICE_S` each) and is given up after it, said
        (what was not committed is read again by the next owner: delivery is at least
        once)."""
        if self._draining or not self._started:
            self.stopped.set()
            return
        self._draining = True
        deadline = StopDeadline("worker", self.settings.stop_limit_s)
        if self._producer_up:  # a start that never reached the broker has nothing to say
            await deadline.step(
                "registry_draining",
                self.membership.announce_leaving("draining"),
                "the draining notice (its lease says so instead)",
                most_s=NOTICE_S,
            )
        pipeline = self.pipeline
        polls = [t for t in self._tasks if t.get_name().startswith("poll-")]
        for task in polls:
            task.cancel()
        if pipeline is not None:
            await pipeline.drain_all(self.settings.drain_timeout_s)
        deadline.renew(STOP_AFTER_DRAIN_S)
        await deadline.end_tasks("loops_end", self._tasks, most_s=NOTICE_S)
        if pipeline is not None:
            await deadline.step(
                "answers_in_flight",
                pipeline.settle(),
                "answers being published (their requests are read again after a restart)",
            )
        for consumer in self.consumers.values():
            await deadline.step(
                "commit_and_release",
                consumer.close(),
                "the last commit of a consumer (its records are read again after a restart)",
            )
        await self.membership.stop_refresh()
        if self._telemetry is not None:
            await deadline.step(
                "last_heartbeat", self._telemetry.stop(), "the last heartbeat", most_s=NOTICE_S
            )
        if self._producer_up:  # a start that never reached the broker has nothing to say
            await deadline.step(
                "registry_gone",
                self.membership.announce_leaving("gone"),
                "the gone notice (its lease says so instead)",
                most_s=NOTICE_S,
            )
        await deadline.step("producer_flush", self.producer.stop(), "records not yet sent")
        await self.host.close()
        log.info(
            "event=worker_stopped instance=%s counts=%s gave_up=%s",
            self.instance_id,
            self.counts,
            deadline.gave_up or "nothing",
        )
        self.stopped.set()


async def run_worker(bootstrap: str, settings: WorkerSettings | None = None) -> None:
    """Run one worker until signalled, with tracing and /metrics set up for the process."""
    # The engine thread needs the GIL for a moment around each run; with the default 5 ms
    # switch interval it can sit idle behind the poll loop's decoding. 0.5 ms keeps it fed.
    sys.setswitchinterval(0.0005)
    worker = Worker(bootstrap, settings)
    init_tracing(
        "inferbus-worker",
        instance_id=worker.instance_id,
        attributes={
            "inferbus.model": worker.settings.model,
            "inferbus.tier": ",".join(worker.tiers),
        },
    )
    start_metrics_server(worker.settings.metrics_port)
    beat = HEALTH.serve(worker.readiness)
    try:
        await worker.run()
    finally:
        beat.cancel()
        shutdown_tracing()

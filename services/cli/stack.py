"""`inferbus up`: the whole system on one machine, with a live view of every worker group."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import shlex
import shutil
import signal
import socket
import sys
import time
import uuid
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from wsgiref.simple_server import WSGIServer

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from infra.broker import EmbeddedBroker
from infra.broker_memory import (
    GROWTH_WINDOW_S,
    MemorySample,
    available_bytes,
    growth_per_minute,
    memory_warning,
    size,
)
from infra.cores import usable_cores
from infra.kafka import make_producer, start_with_retry
from infra.models.repository import ModelRepository
from infra.processes import (
    SupervisedGroup,
    inferbus_command,
    kill_children,
    process_rss_bytes,
)
from infra.security import KafkaSecurityError, KafkaSecuritySettings, process_security
from infra.tasks import cancel_and_wait, wait_ended, wait_event
from infra.topics import ensure_topics, repository_topics
from scaler.actuators.base import parse_group
from scaler.actuators.local import LocalActuator
from scaler.collector.collector import CollectorConfig
from scaler.collector.lag import group_lag, summarize
from scaler.collector.offsets import GroupOffsetReader
from scaler.config import PolicyConfig
from scaler.service import GroupView, ScalerService
from scaler.settings import IDLE_HOLD_EVERY_S, RECALL_TIMEOUT_S
from schemas.errors import InferbusError
from schemas.telemetry import InstanceRecord
from schemas.topics import INGEST_GROUP, INGEST_TOPICS, INSTANCES, TIERS, Tier
from services.models.demo import write_demo_models
from services.runtime.membership import gone_record
from services.worker.settings import WorkerSettings
from tracing.health import HEALTH
from tracing.metrics import start_metrics_server
from tracing.setup import init_tracing, shutdown_tracing

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StackOptions:
    """What `inferbus up` runs."""

    bootstrap: str | None
    models_dir: Path
    workers_per_group: int
    headless: bool
    duration_s: float | None
    with_scaler: bool
    tiers: list[Tier] | None
    broker_port: int | None
    log_dir: Path
    status_every_s: float = 5.0
    policy: str = "slo"
    """The scaling policy (INFERBUS_SCALER_POLICY)."""
    policy_config: PolicyConfig | None = None
    """Policy knobs; None: the defaults."""
    collector_config: CollectorConfig | None = None
    """Collection interval and windows; None: the defaults."""
    worker_env: Mapping[str, str] | None = None
    """Extra environment for every worker the actuator starts."""
    ingest_instances: int = 1
    """Ingest processes, one consumer group: they share the ingest topics' partitions."""
    worker_budget: int | None = None
    """Most workers at once over all groups (the policy's global budget); None:
    `local_worker_budget`."""
    idle_hold_every_s: float = IDLE_HOLD_EVERY_S
    """How often an idle group's unchanged hold is written (INFERBUS_SCALER_IDLE_HOLD_EVERY_S)."""
    recall_timeout_s: float = RECALL_TIMEOUT_S
    """How long the scaler reads its decision records back at start
    (INFERBUS_SCALER_RECALL_TIMEOUT_S); 0: it starts with no memory."""
    scaler_metrics_port: int = 0
    """Where the scaler's gauges are served (INFERBUS_SCALER_METRICS_PORT); 0: off."""
    worker_grace_s: float | None = None
    """How long a scale-in waits after SIGTERM before a second one
    (`WorkerSettings.stop_grace_s`); None: what INFERBUS_WORKER_* in this environment give."""


def local_worker_budget(requested: int | None, cores: int, started: int) -> int:
    """The global replica budget `inferbus up` gives its scaler: the workers started (each
    group's floor; most groups are idle at any time, and an idle worker costs next to no
    CPU) plus one per core beyond the first, so that one busy group can run a worker on
    every core. More busy workers than cores on one host only slow each other down.

    Measured (docs/operations.md): with MiniLM alone on 2 cores, three tiers start three
    workers; a budget of the cores (the rule before) left the busy interactive group at its
    one worker, the scaler granting 1 of the 8 it asked for, at ~290 of the ~430 req/s two
    workers serve.
    """
    if requested is not None:
        return requested
    return started + max(cores - 1, 0)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def decision_text(view: GroupView, *, acting: bool, none: str) -> str:
    """The group's last decision; advice only when the scaler does not act (`--no-scaler`)."""
    if view.decision is None:
        return none
    line = view.decision.line()
    return line if acting else f"scaler off, it would: {line}"


def status_line(view: GroupView, *, acting: bool = True) -> str:
    """One line per group for headless mode."""
    s = view.collection.signals
    decision = decision_text(view, acting=acting, none="no decision yet")
    if s is None:
        return f"{view.collection.group}: no signals yet ({view.collection.error or 'starting'})"
    return (
        f"{s.group} replicas={s.ready_replicas}/{s.replicas} lag={s.lag} "
        f"arrival={_rate(s.arrival_rps)}/s service/replica={_rate(s.service_rps_per_replica)}/s "
        f"queue_p99={_ms(s.queue_p99_ms)}ms engine_p99={_ms(s.engine_p99_ms)}ms "
        f"e2e_p99={_ms(s.e2e_p99_ms)}ms slo={_ms(s.slo_p99_e2e_ms)}ms | {decision}"
    )


def stack_ready(views: Mapping[str, GroupView]) -> bool:
    """Every group that should run a worker has one consuming (loaded and warmed)."""
    signals = [view.collection.signals for view in views.values()]
    return bool(signals) and all(
        s is not None and s.ready_replicas >= min(s.replicas, 1) for s in signals
    )


def refuse_security_for_the_embedded_broker(settings: KafkaSecuritySettings) -> None:
    """The embedded broker listens in plain text: a process set for TLS or SASL would wait
    52 s for a TLS answer and then blame the broker."""
    if settings.security_protocol != "PLAINTEXT":
        raise KafkaSecurityError(
            f"the embedded broker listens in plain text, and "
            f"INFERBUS_KAFKA_SECURITY_PROTOCOL={settings.security_protocol}: unset the "
            "INFERBUS_KAFKA_SECURITY_PROTOCOL, _SSL_* and _SASL_* variables, or give "
            "--bootstrap a broker that uses them"
        )


def ready_message(views: Mapping[str, GroupView], *, acting: bool = True) -> str:
    """What `up` says once `stack_ready`: a group scaled to zero (a budget below the groups'
    count gives idle lower tiers none) is named, not counted as serving."""
    without = sorted(
        group
        for group, view in views.items()
        if (s := view.collection.signals) is not None and s.replicas == 0
    )
    if not without:
        return "ready: every group has a worker serving"
    then = "the scaler starts one when requests come" if acting else "the scaler is off"
    return (
        f"ready: every group with a worker has it serving; none for {', '.join(without)} ({then})"
    )


WIDE_VIEW_COLUMNS = 120
"""Under this terminal width the live view drops the per-replica and engine columns and
prints each group's last decision under the table: ten columns folded into 80."""
VIEW_COLUMNS = (
    "group",
    "ready/all",
    "lag",
    "arrival/s",
    "svc/s/rep",
    "queue p99",
    "engine p99",
    "e2e p99",
    "SLO",
    "last decision",
)
WIDE_ONLY = frozenset({"svc/s/rep", "engine p99", "last decision"})


def status_table(
    views: dict[str, GroupView],
    bootstrap: str,
    elapsed_s: float,
    *,
    acting: bool = True,
    width: int = WIDE_VIEW_COLUMNS,
    broker_bytes: int | None = None,
) -> RenderableType:
    """The live view: one row per worker group; narrow, the decisions below the table.
    `broker_bytes`: what the embedded broker holds in memory (it only grows)."""
    state = "ready" if stack_ready(views) else "workers starting"
    if broker_bytes is not None:
        state += f", broker {size(broker_bytes)} in memory"
    wide = width >= WIDE_VIEW_COLUMNS
    table = Table(title=f"inferbus on {bootstrap} — up {elapsed_s:.0f}s, {state} (Ctrl-C stops)")
    shown = [c for c in VIEW_COLUMNS if wide or c not in WIDE_ONLY]
    for column in shown:
        table.add_column(column, overflow="fold")
    decisions = []
    for group in sorted(views):
        view = views[group]
        s = view.collection.signals
        name = group.removeprefix("inferbus.workers.")
        decision = decision_text(view, acting=acting, none="-")
        if s is None:
            decision = view.collection.error or ""
            cells = {"group": group}
        else:
            cells = {
                "group": name,
                "ready/all": f"{s.ready_replicas}/{s.replicas}",
                "lag": str(s.lag if s.lag is not None else "-"),
                "arrival/s": _rate(s.arrival_rps),
                "svc/s/rep": _rate(s.service_rps_per_replica),
                "queue p99": _ms(s.queue_p99_ms),
                "engine p99": _ms(s.engine_p99_ms),
                "e2e p99": _ms(s.e2e_p99_ms),
                "SLO": _ms(s.slo_p99_e2e_ms),
            }
        cells["last decision"] = decision
        table.add_row(*(cells.get(c, "-") for c in shown))
        decisions.append(f"{name}: {decision}")
    if wide:
        return table
    return Group(table, *decisions)


async def queued_requests(
    bootstrap: str, queues: Sequence[tuple[str, str]], timeout_s: float = 5.0
) -> int | None:
    """Records not yet consumed by their group, over (group, topic) pairs: requests nobody
    has answered. None when the broker could not say within `timeout_s`."""
    total = 0
    try:
        async with asyncio.timeout(timeout_s):
            for group, topic in queues:
                reader = GroupOffsetReader(bootstrap, group, topic, timeout_s=timeout_s)
                await reader.start()
                try:
                    answer = await reader.read()
                finally:
                    await reader.close()
                total += summarize(group_lag(answer.offsets, {}, stuck_after=0)).total
    except (KafkaError, TimeoutError, OSError) as exc:
        log.warning("event=queued_requests_unknown error=%r", exc)
        return None
    return total


BROKER_MEMORY_EVERY_S = 30.0
"""How often `up` reads the embedded broker's memory."""


@dataclass
class BrokerMemory:
    """What `up` has read of the embedded broker's memory since it (re)started."""

    samples: deque[MemorySample] = field(default_factory=deque)
    warned_share: float = 0.0
    last_read_s: float = float("-inf")


class Stack:
    """Broker, topics, ingest, workers and the scaler; stops everything it started."""

    def __init__(self, options: StackOptions) -> None:
        self.options = options
        self.console = Console()
        self.broker: EmbeddedBroker | None = None
        self.ingest: SupervisedGroup | None = None
        self._producer: AIOKafkaProducer | None = None
        self._ingest_ids: dict[str, str] = {}
        self._watch: asyncio.Task[None] | None = None
        self._broker_watch: asyncio.Task[None] | None = None
        self._beat: asyncio.Task[None] | None = None
        self._metrics: WSGIServer | None = None
        self.broker_restarts = 0
        self.broker_rss_bytes: int | None = None
        """The embedded broker's resident memory at the last read (None: none read)."""
        self._broker_memory = BrokerMemory()
        self.actuator: LocalActuator | None = None
        self.scaler: ScalerService | None = None
        self.bootstrap: str | None = None
        self.stop = asyncio.Event()
        self._interrupts: int | None = None
        """Ctrl-Cs (or SIGTERMs) so far, once `run` handles them; None when it does not."""

    def _say(self, text: str) -> None:
        # soft_wrap: a line written to a file or pipe stays one line (a command to copy).
        self.console.print(f"[bold]inferbus[/bold] {escape(text)}", soft_wrap=True)

    async def start(self) -> str:
        """Start broker, topics, ingest, the initial workers and the scaler's connections.

        The scaler loop itself is not started (`run` starts it; a benchmark may drive
        `self.scaler.collector.run` itself). Returns the bootstrap address.
        """
        options = self.options
        bootstrap = options.bootstrap
        if bootstrap is None:
            refuse_security_for_the_embedded_broker(process_security().settings)
            self.broker = EmbeddedBroker(port=options.broker_port)
            bootstrap = await asyncio.to_thread(self.broker.start)
            self._say(f"embedded broker (Tansu, memory only) on {bootstrap}")
        self.bootstrap = bootstrap
        repository = ModelRepository(options.models_dir)
        if not repository.names():
            written = write_demo_models(options.models_dir)
            self._say(f"wrote demo models to {options.models_dir} ({len(written)} files)")
        names = repository.names()
        created = await ensure_topics(bootstrap, repository_topics(repository))
        self._say(f"models: {', '.join(names)}; topics created: {len(created)}")
        options.log_dir.mkdir(parents=True, exist_ok=True)
        self._producer = make_producer(bootstrap, client_id="inferbus-up")
        await start_with_retry(self._producer.start, what="up-producer")
        self.ingest = SupervisedGroup(
            "ingest",
            inferbus_command(
                "ingest", "--bootstrap", bootstrap, "--models", str(options.models_dir)
            ),
            options.ingest_instances,
            env_for=self._ingest_env,
            log_dir=options.log_dir,
        )
        self.ingest.start()
        self._watch = asyncio.create_task(self._watch_ingest(), name="ingest-supervisor")
        if self.broker is not None:
            self._broker_watch = asyncio.create_task(
                self._watch_broker(repository), name="broker-supervisor"
            )
        self.actuator = LocalActuator(
            bootstrap,
            options.models_dir,
            command=inferbus_command("worker"),
            env=options.worker_env,
            log_dir=options.log_dir,
            drain_in_background=True,  # a drain must not stall the scaler's loop
            grace_s=options.worker_grace_s or WorkerSettings().stop_grace_s,
            announce_exit=self._worker_gone,
        )
        self.scaler = ScalerService(
            bootstrap,
            options.models_dir,
            self.actuator,
            act=options.with_scaler,
            tiers=options.tiers,
            policy=options.policy,
            config=options.policy_config,
            collector_config=options.collector_config,
            idle_hold_every_s=options.idle_hold_every_s,
            recall_timeout_s=options.recall_timeout_s,
        )
        started = len(self.scaler.collector.groups) * options.workers_per_group
        budget = local_worker_budget(options.worker_budget, usable_cores(), started)
        self.scaler.config = dataclasses.replace(self.scaler.config, max_total_replicas=budget)
        for group in self.scaler.collector.groups:
            await self.actuator.scale(
                group, options.workers_per_group, "inferbus up: initial workers"
            )
        await self.scaler.start()
        self._serve_health(self.scaler)
        self._metrics = start_metrics_server(options.scaler_metrics_port)
        if self._metrics is not None:
            self._say(
                f"scaler metrics on :{options.scaler_metrics_port}/metrics, health on /healthz "
                "and /readyz (workers from INFERBUS_WORKER_METRICS_PORT on, one port each)"
            )
        self._say(
            f"{options.ingest_instances} ingest and {started} worker(s) starting; scaler "
            f"{'on' if options.with_scaler else 'off'} (at most {budget} workers: "
            f"INFERBUS_SCALER_MAX_TOTAL_REPLICAS); logs in {options.log_dir}"
        )
        groups = len(self.scaler.collector.groups)
        if options.with_scaler and budget < groups:
            self._say(
                f"note: {budget} workers for {groups} groups: idle groups of the lower tiers "
                "get none (batch first); a group with requests waiting gets one before an "
                "idle group keeps its own"
            )
        return bootstrap

    def _serve_health(self, scaler: ScalerService) -> None:
        """`/healthz` and `/readyz` on the scaler's metrics port answer for this scaler, as
        the standalone scaler's do: live while this event loop beats, ready once it decides."""
        if self._beat is None:
            self._beat = HEALTH.serve(scaler.readiness)
        else:
            HEALTH.serve_readiness(scaler.readiness)

    def _ingest_env(self, index: int) -> dict[str, str]:
        instance_id = f"ingest-{socket.gethostname()}-{index}-{uuid.uuid4().hex[:6]}"
        self._ingest_ids[f"ingest-{index}"] = instance_id
        env = {"INFERBUS_INGEST_INSTANCE_ID": instance_id}
        if self.options.tiers is not None:
            # Requests for a tier no worker here serves are refused, not left in its topic.
            env["INFERBUS_INGEST_TIERS"] = json.dumps(self.options.tiers)
        return env

    async def _watch_ingest(self) -> None:
        """Restart ingest instances that exit unasked, and say at once that they are gone."""
        while True:
            await asyncio.sleep(0.5)
            if self.ingest is None:
                return
            for child in self.ingest.check():
                instance_id = self._ingest_ids.get(child.name)
                if instance_id:
                    await self._announce_gone(
                        gone_record(
                            instance_id,
                            model="",
                            tiers=list(TIERS),
                            group=INGEST_GROUP,
                            service="inferbus-ingest",
                        )
                    )

    def _read_broker_memory(self, pid: int | None) -> None:
        """Sample the embedded broker's memory; warn as it crosses `WARN_SHARES`."""
        now = time.monotonic()
        if pid is None or now - self._broker_memory.last_read_s < BROKER_MEMORY_EVERY_S:
            return
        memory = self._broker_memory
        memory.last_read_s = now
        rss, available = process_rss_bytes(pid), available_bytes()
        if rss is None or available is None:
            return
        memory.samples.append(MemorySample(now, rss))
        while memory.samples and memory.samples[0].t_s < now - GROWTH_WINDOW_S:
            memory.samples.popleft()
        self.broker_rss_bytes = rss
        text, memory.warned_share = memory_warning(
            rss, available, memory.warned_share, growth_per_minute(memory.samples)
        )
        if text is not None:
            log.warning("event=broker_memory rss_bytes=%d available_bytes=%d", rss, available)
            self._say(text)

    async def _watch_broker(self, repository: ModelRepository) -> None:
        """Start the embedded broker again when it exits unasked, on the same port, with the
        topics made again: its logs lived in memory and are gone, and the services and
        clients find the new broker and read its logs from the start. Meanwhile, watch
        what it holds in memory (`_read_broker_memory`)."""
        while True:
            await asyncio.sleep(0.5)
            broker = self.broker
            if broker is None or self.stop.is_set():
                return
            code = broker.exited
            if code is None:
                self._read_broker_memory(broker.pid)
                continue
            self._broker_memory = BrokerMemory()
            log.error("event=broker_exited returncode=%s bootstrap=%s", code, broker.bootstrap)
            self._say(
                f"the embedded broker exited (return code {code}); what it held in memory is "
                f"lost. Starting it again on {broker.bootstrap}"
            )
            try:
                await asyncio.to_thread(broker.restart)
                await ensure_topics(broker.bootstrap, repository_topics(repository))
            except (InferbusError, KafkaError, OSError) as exc:
                self._say(f"could not start the broker again: {exc}; stopping")
                self.stop.set()
                return
            self.broker_restarts += 1
            self._say(
                "broker back: services reconnect on their own; requests not answered before "
                "it exited get no answer (clients of inferbus's own send theirs again)"
            )

    async def _worker_gone(self, group: str, instance_id: str, returncode: int | None) -> None:
        model, tier, _ = parse_group(group)
        await self._announce_gone(
            gone_record(
                instance_id, model=model, tiers=[tier], group=group, service="inferbus-worker"
            )
        )

    async def _announce_gone(self, record: InstanceRecord) -> None:
        if self._producer is None:
            return
        try:
            await self._producer.send_and_wait(
                INSTANCES, record.model_dump_json().encode(), key=record.instance_id.encode()
            )
        except KafkaError as exc:  # its lease runs out instead: slower, never wrong
            log.warning("event=gone_announce_failed instance=%s error=%r", record.instance_id, exc)

    async def close(self) -> None:
        """Drain workers, stop ingest and the broker: whatever `start` got to; idempotent."""
        hint = ""
        if self._interrupts is not None:
            again = " again" if self._interrupts else ""
            hint = f" (Ctrl-C{again}: stop at once)"
        self._say(f"stopping: draining workers, ingest, broker{hint}")
        queues: list[tuple[str, str]] = [(INGEST_GROUP, topic) for topic in INGEST_TOPICS]
        if self.scaler is not None:
            collector = self.scaler.collector
            queues += [(g, collector.target(g).topic) for g in collector.groups]
            await self.scaler.close()
            self.scaler = None
        if self.actuator is not None:
            await self.actuator.close()
            self.actuator = None
        for task in (self._watch, self._broker_watch, self._beat):
            await cancel_and_wait(task)
        self._watch = self._broker_watch = self._beat = None
        if self.ingest is not None:
            await asyncio.to_thread(self.ingest.stop)
            self.ingest = None
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None
        if self.broker is not None:
            if self.broker.running:
                self._say_left_behind(await queued_requests(self.broker.bootstrap, queues))
            await asyncio.to_thread(self.broker.stop)
            self.broker = None
        if self._metrics is not None:
            self._metrics.shutdown()
            self._metrics = None
        self._say("stopped")

    def _say_left_behind(self, left: int | None) -> None:
        if left is None:
            self._say("could not count the requests left in the embedded broker")
        elif left:
            self._say(
                f"{left} request(s) were still queued in the embedded broker (memory only) "
                "and are lost with it: their producers get no answer"
            )

    def _on_signal(self, signum: int) -> None:
        """The first Ctrl-C, SIGTERM or SIGHUP stops in order. One more Ctrl-C while it
        stops (or the first, when the stack already stops for another reason) kills every
        child at once and exits 128 + the signal (what was not committed is read again next
        time). A SIGTERM or SIGHUP then does not: process managers send SIGTERM again, and a
        closing terminal sends SIGHUP after it, neither a person's word to skip the drain
        (SIGKILL is that)."""
        first = not self.stop.is_set()
        if first:
            self._interrupts = (self._interrupts or 0) + 1
            self.stop.set()
            return
        if signum != signal.SIGINT:
            self._say(f"{signal.Signals(signum).name} while stopping: the drain goes on")
            return
        self._interrupts = (self._interrupts or 0) + 1
        killed = kill_children()
        self._say(f"stopped at once: killed {len(killed)} process group(s), nothing drained")
        self.console.show_cursor(True)  # a live view hides it
        sys.stdout.flush()
        os._exit(128 + signum)

    async def run(self) -> None:
        """Start everything, show status until Ctrl-C or the duration, then stop all."""
        # The scaler in this process exports spans as `inferbus scaler run` does (where an
        # exporter is set): a retired model's queued requests are answered from a span in
        # each one's trace (`services/runtime/orphans.py`). Tracing is the process's, set
        # once: `run` is `inferbus up`'s alone (benches and tests call `start`/`close`).
        init_tracing("inferbus-scaler", instance_id=f"scaler-up-{os.getpid()}")
        loop = asyncio.get_running_loop()
        signals = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
        for sig in signals:
            loop.add_signal_handler(sig, self._on_signal, sig)
        self._interrupts = 0
        try:
            bootstrap = await self.start()
            scaler = self.scaler
            assert scaler is not None
            if "demo-mlp" in ModelRepository(self.options.models_dir).names():
                x = ", ".join(f"{0.1 * i:.1f}" for i in range(1, 17))
                self._say(
                    f"try: {_this_command()} infer demo-mlp --bootstrap {bootstrap} "
                    f"--json '{{\"x\": [[{x}]]}}'"
                )
            scaler_task = asyncio.create_task(scaler.run(self.stop), name="scaler")
            # A scaler loop that ends on its own stops the stack with its error: a stack
            # that goes on without its scaler would show a frozen view.
            scaler_task.add_done_callback(lambda _: self.stop.set())
            await self._show(scaler, bootstrap)
            self.stop.set()
            await wait_ended(scaler_task)
        finally:
            try:
                await self.close()
            finally:
                # Off the loop: an exporter whose endpoint is gone blocks for its timeout,
                # and one more Ctrl-C must still stop it at once.
                await asyncio.to_thread(shutdown_tracing)
                for sig in signals:
                    loop.remove_signal_handler(sig)

    async def _show(self, scaler: ScalerService, bootstrap: str) -> None:
        started = time.monotonic()
        deadline = started + self.options.duration_s if self.options.duration_s else None

        async def wait_tick() -> bool:
            timeout = self.options.status_every_s
            if deadline is not None:
                timeout = min(timeout, max(deadline - time.monotonic(), 0))
            await wait_event(self.stop, timeout)
            return self.stop.is_set() or (deadline is not None and time.monotonic() >= deadline)

        if self.options.headless:
            said_ready = False
            said_restarts = 0
            while not await wait_tick():
                if not said_ready and stack_ready(scaler.views):
                    said_ready = True
                    self._say(ready_message(scaler.views, acting=self.options.with_scaler))
                at = time.strftime("%H:%M:%S")
                for group in sorted(scaler.views):
                    line = status_line(scaler.views[group], acting=scaler.act)
                    print(f"{at} {line}", flush=True)
                restarts = self.ingest.restarts if self.ingest is not None else 0
                if restarts != said_restarts:
                    said_restarts = restarts
                    self._say(f"ingest restarted {restarts} time(s); see its logs")
            return
        acting = scaler.act
        with Live(
            status_table(scaler.views, bootstrap, 0, acting=acting, width=self.console.width),
            console=self.console,
            refresh_per_second=1,
        ) as live:
            while not await wait_tick():
                elapsed = time.monotonic() - started
                view = status_table(
                    scaler.views,
                    bootstrap,
                    elapsed,
                    acting=acting,
                    width=self.console.width,
                    broker_bytes=self.broker_rss_bytes,
                )
                live.update(view)


def _this_command() -> str:
    """How the user ran inferbus (`.venv/bin/inferbus` from `make up`), for a hint to copy;
    `inferbus` when it ran some other way."""
    argv0 = sys.argv[0] if sys.argv else ""
    if Path(argv0).name != "inferbus":
        return "inferbus"
    on_path = shutil.which("inferbus")
    if on_path is not None and Path(on_path).resolve() == Path(argv0).resolve():
        return "inferbus"
    if not os.path.isabs(argv0):
        return shlex.quote(argv0)
    relative = os.path.relpath(argv0)
    # Below the working folder a relative path is shorter; above it, the absolute one reads.
    return shlex.quote(argv0 if relative.startswith("..") else relative)

"""The run: check the stack answers, send on schedule (open loop), collect every result.

Requests go to the per-tier ingest topics in record batches (services.runtime.publisher
Publisher) keyed by request id; results are read from the reply topic and matched by id.
The schedule never waits for answers. After the last send the run waits until every
request is answered or past its deadline plus the grace, and no longer. Ctrl-C stops the
sending; the run then waits `INTERRUPT_WAIT_S` at most and reports what it has.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from infra.kafka import make_consumer, make_producer, start_with_retry
from infra.log_end import LogEndProbe
from infra.models.config import ModelConfig
from infra.tasks import cancel_and_wait, within
from scaler.sim.workload import Workload
from schemas import headers as h
from schemas.errors import InferbusError
from schemas.frames import CONTENT_TYPE as FRAME_CONTENT_TYPE
from schemas.topics import RESULTS, Tier, ingest_topic, request_topic, worker_group
from services.bench.loadgen import read_result
from services.load.events import EventFactory
from services.load.ledger import Ledger, Sent
from services.load.observe import StackObserver, ingest_instances, replica_states, workers_of
from services.load.results import ResultReader
from services.load.sigint import first_sigint_calls
from services.runtime.publisher import Outgoing, Publisher

_HEADERS = [(h.CONTENT_TYPE, FRAME_CONTENT_TYPE), (h.SCHEMA, h.REQUEST_SCHEMA_V1)]
INTERRUPT_WAIT_S = 2.0
"""After Ctrl-C, how long the run still waits for answers to what it sent."""


log = logging.getLogger(__name__)


class LoadError(InferbusError):
    """The stack cannot take a load run (no topics, no ingest, no worker for a tier)."""


@dataclass(frozen=True)
class RunOptions:
    """Where and how to send."""

    bootstrap: str
    tenant: str | None = "inferbus-load"
    reply_to: str = RESULTS
    timeout_ms: Mapping[Tier, int] = field(
        default_factory=lambda: {"critical": 10_000, "interactive": 20_000, "batch": 60_000}
    )
    grace_s: float = 10.0
    probe_timeout_s: float = 60.0
    seed: int = 1


@dataclass(frozen=True)
class Status:
    """Progress of a run, handed to the caller about twice a second."""

    stage: str
    t_s: float
    scheduled: int
    sent: int
    answered: int
    errors: int
    waiting: int
    """Unanswered and still within deadline plus grace (the lost are not in it)."""
    lost: int
    logs_reread: int = 0
    """Times the reply topic's logs were found restarted and read again from their start."""
    interrupted: bool = False


@dataclass
class RunRecord:
    """Everything a run saw: the ledger and the stack's registry and decisions."""

    ledger: Ledger
    observer: StackObserver
    ended_s: float
    wall_origin: float
    initial_ready: dict[str, int]
    probe_ms: dict[str, float]
    partitions: dict[str, int]
    """Partitions of each tier's request topic."""
    interrupted_at_s: float | None = None
    """When Ctrl-C stopped the sending (run seconds); None for a run that ran its course."""
    logs_reread: int = 0
    """Times the reply topic's logs were found restarted and read again from their start."""


def _require_topics(topics: set[str], reply_to: str, tiers: list[Tier], where: str) -> None:
    """Refuse a broker without the tiers' ingest topics or without the reply topic."""
    missing = [ingest_topic(t) for t in tiers if ingest_topic(t) not in topics]
    if missing:
        raise LoadError(
            f"topic(s) {', '.join(missing)} do not exist at {where}: is an inferbus stack "
            "running there? (`inferbus up`, or `inferbus topics create`)"
        )
    if reply_to not in topics:
        create = "" if reply_to == RESULTS else f" --reply-topic {reply_to}"
        raise LoadError(
            f"the reply topic {reply_to} does not exist at {where}: create it "
            f"(`inferbus topics create{create}`) or pass another --reply-to"
        )


def _schedule(workload: Workload) -> tuple[np.ndarray[Any, Any], list[Tier], list[int]]:
    """Every send, merged over tiers and sorted by time: (times, tier, tokens)."""
    rows = [
        (float(t), tier, int(n))
        for tier, arrivals in workload.tiers.items()
        for t, n in zip(arrivals.times, arrivals.tokens, strict=True)
    ]
    rows.sort(key=lambda row: row[0])
    return (
        np.array([r[0] for r in rows], dtype=float),
        [r[1] for r in rows],
        [r[2] for r in rows],
    )


class LoadRun:
    """One run of a workload against a running stack; `await run()` once."""

    def __init__(
        self,
        options: RunOptions,
        workload: Workload,
        config: ModelConfig,
        on_status: Callable[[Status], None] = lambda _: None,
    ) -> None:
        self.options = options
        self.workload = workload
        self.config = config
        self.on_status = on_status
        self.tiers: list[Tier] = list(workload.tiers)
        self.groups = [worker_group(config.name, tier) for tier in self.tiers]
        self.events = EventFactory(
            config,
            tenant=options.tenant,
            reply_to=options.reply_to,
            timeout_ms=dict(options.timeout_ms),
            seed=options.seed,
        )
        self.ledger = Ledger()
        self.observer = StackObserver(options.bootstrap, self.groups)
        self._producer: AIOKafkaProducer | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._log_ends = LogEndProbe(options.bootstrap, client_id="inferbus-load")
        self._reader: ResultReader | None = None
        self._publisher: Publisher | None = None
        self._sends: set[asyncio.Task[None]] = set()
        self._origin = time.perf_counter()
        self._stage = "connecting"
        self._scheduled = 0
        self._probes: dict[str, float] = {}
        self.partitions: dict[str, int] = {}
        self._probe_answers: dict[str, asyncio.Future[Mapping[str, Any]]] = {}
        self._interrupted_at: float | None = None

    def now_s(self) -> float:
        """Seconds since the schedule's start (negative before it)."""
        return time.perf_counter() - self._origin

    # ---- set-up --------------------------------------------------------------------

    async def _connect(self) -> None:
        # Kept before they start, so that `_close` stops them whatever fails.
        producer = self._producer = make_producer(self.options.bootstrap, client_id="inferbus-load")
        await start_with_retry(producer.start, what="load-producer")
        self._publisher = Publisher(producer)
        consumer = self._consumer = make_consumer(
            bootstrap=self.options.bootstrap, group_id=None, client_id="inferbus-load"
        )
        await start_with_retry(consumer.start, what="load-results")
        _require_topics(
            await consumer.topics(), self.options.reply_to, self.tiers, self.options.bootstrap
        )
        self.partitions = {
            tier: len(consumer.partitions_for_topic(request_topic(self.config.name, tier)) or ())
            for tier in self.tiers
        }
        tps = [
            TopicPartition(self.options.reply_to, p)
            for p in sorted(consumer.partitions_for_topic(self.options.reply_to) or ())
        ]
        consumer.assign(tps)
        await consumer.seek_to_end(*tps)
        for tp in tps:
            await consumer.position(tp)
        self._reader = ResultReader(consumer, self._log_ends, self._on_value)

    def _check_stack(self) -> dict[str, int]:
        """Refuse a stack with no ingest or no worker for a tier; ready workers per group."""
        table, now = self.observer.table(), datetime.now(UTC)
        where = self.options.bootstrap
        if self.observer.registry.error is not None:
            raise LoadError(f"cannot read the registry at {where}: {self.observer.registry.error}")
        if ingest_instances(table, now) == 0:
            raise LoadError(
                f"no live ingest instance is registered at {where} (inferbus.instances): "
                "nothing would route the requests; start the stack (`inferbus up`)"
            )
        for tier, group in zip(self.tiers, self.groups, strict=True):
            if workers_of(table, group, now) == 0:
                raise LoadError(
                    f"no worker serves {self.config.name} on tier {tier} at {where} ({group}); "
                    f"start the stack with that tier (`inferbus up --tiers ...`) or pick "
                    "another --model / --tiers"
                )
        return {g: replica_states(table, g, now)["ready"] for g in self.groups}

    async def _probe(self) -> None:
        """One request per tier, answered ok, before the clock starts: a stack still loading
        its workers would otherwise make the first seconds of every run a cold start."""
        loop = asyncio.get_running_loop()
        for tier in self.tiers:
            request_id = uuid.uuid4().hex
            future: asyncio.Future[Mapping[str, Any]] = loop.create_future()
            self._probe_answers[request_id] = future
            sent = time.perf_counter()
            self._send_batch([(request_id, tier, 16)], probe=True)
            try:
                result = await within(future, self.options.probe_timeout_s)
            except TimeoutError:
                raise LoadError(
                    f"the stack at {self.options.bootstrap} did not answer a {tier} request to "
                    f"{self.config.name} within {self.options.probe_timeout_s:g} s; see its logs"
                ) from None
            if result.get("status") != "ok":
                error = result.get("error") or {}
                raise LoadError(
                    f"the stack answered a {tier} request to {self.config.name} with "
                    f"{result.get('status')}: {error.get('message', 'no message')}"
                )
            self._probes[tier] = round((time.perf_counter() - sent) * 1000, 1)

    # ---- the run -------------------------------------------------------------------

    async def run(self) -> RunRecord:
        """Connect, check, probe, send the schedule, wait for the answers; always disconnects."""
        reader: asyncio.Task[None] | None = None
        ticker: asyncio.Task[None] | None = None
        try:
            await self._connect()
            await self.observer.start()
            initial_ready = self._check_stack()
            reader = asyncio.create_task(self._read(), name="load-results")
            ticker = asyncio.create_task(self._tick(), name="load-status")
            self._stage = "probing"
            await self._probe()
            times, tiers, tokens = _schedule(self.workload)
            self._scheduled = times.size
            self._origin = time.perf_counter() + 0.2
            wall_origin = time.time() + 0.2
            self.observer.begin(wall_origin)
            self._stage = "sending"
            with first_sigint_calls(self.interrupt):
                await self._send_all(times, tiers, tokens)
                self._stage = "waiting"
                await self._wait_for_answers()
            ended = self.now_s()
            self._stage = "done"
            self.on_status(self.status())
            return RunRecord(
                self.ledger,
                self.observer,
                ended,
                wall_origin,
                initial_ready,
                dict(self._probes),
                dict(self.partitions),
                self._interrupted_at,
                self._reader.restarts if self._reader is not None else 0,
            )
        finally:
            for task in (ticker, reader):
                await cancel_and_wait(task)
            await self._close()

    def interrupt(self) -> None:
        """Stop sending (Ctrl-C): the run waits `INTERRUPT_WAIT_S` at most for what it sent
        to be answered, then ends with what it has."""
        if self._interrupted_at is None:
            self._interrupted_at = self.now_s()
            log.info(
                "event=load_interrupted t_s=%.1f sent=%d",
                self._interrupted_at,
                len(self.ledger.sent),
            )

    async def _wait_for_answers(self) -> None:
        """Until every request is answered or past its deadline plus the grace; after an
        interruption, `INTERRUPT_WAIT_S` at most."""
        while not self.ledger.settled(self.now_s(), self.options.grace_s):
            if (
                self._interrupted_at is not None
                and self.now_s() - self._interrupted_at >= INTERRUPT_WAIT_S
            ):
                return
            await asyncio.sleep(0.1)  # results arrive on the reader task

    async def _send_all(
        self, times: np.ndarray[Any, Any], tiers: list[Tier], tokens: list[int]
    ) -> None:
        done = 0
        while done < times.size and self._interrupted_at is None:
            now = self.now_s()
            due = int(np.searchsorted(times, now, side="right"))
            if due > done:
                batch = [(uuid.uuid4().hex, tiers[i], tokens[i]) for i in range(done, due)]
                self._send_batch(batch)
                done = due
            if done < times.size and self._interrupted_at is None:
                await asyncio.sleep(min(0.005, max(float(times[done]) - self.now_s(), 0.0)))
        if self._sends:
            await asyncio.gather(*self._sends)

    def _send_batch(self, batch: list[tuple[str, Tier, int]], *, probe: bool = False) -> None:
        """Hand a batch to the producer; acks are awaited in the background."""
        now = self.now_s()
        records = []
        for request_id, tier, tokens in batch:
            if not probe:
                timeout_s = self.options.timeout_ms[tier] / 1000
                self.ledger.on_sent(Sent(request_id, tier, now, now + timeout_s, tokens))
            value = self.events(request_id, tier, tokens)
            records.append(Outgoing(ingest_topic(tier), request_id.encode(), value, _HEADERS))
        task = asyncio.create_task(self._acked(records))
        self._sends.add(task)
        task.add_done_callback(self._sends.discard)

    async def _acked(self, records: list[Outgoing]) -> None:
        assert self._publisher is not None
        acks = await self._publisher.send_all(records)
        for record, ack in zip(records, acks, strict=True):
            if not isinstance(ack, BaseException):
                continue
            request_id = (record.key or b"").decode()
            probe = self._probe_answers.pop(request_id, None)
            if probe is not None:
                probe.set_exception(LoadError(f"cannot produce to {record.topic}: {ack!r}"))
            else:
                self.ledger.on_send_failed(request_id, repr(ack)[:300], self.now_s())

    async def _read(self) -> None:
        assert self._reader is not None
        await self._reader.run()

    def _on_value(self, value: bytes) -> None:
        self._on_result(read_result(value), self.now_s())

    def _on_result(self, result: Mapping[str, Any], now: float) -> None:
        request_id = str(result.get("request_id", ""))
        probe = self._probe_answers.pop(request_id, None)
        if probe is not None:
            if not probe.done():
                probe.set_result(result)
            return
        error = result.get("error")
        self.ledger.on_result(
            request_id,
            now,
            str(result.get("status", "")),
            result.get("timings") or {},
            batch_size=result.get("batch_size"),
            message=str(error.get("message", "")) if isinstance(error, dict) else None,
        )

    def status(self) -> Status:
        ledger, now = self.ledger, self.now_s()
        errors = sum(1 for a in ledger.answered.values() if a.status != "ok")
        return Status(
            stage=self._stage,
            t_s=max(now, 0.0),
            scheduled=self._scheduled,
            sent=len(ledger.sent),
            answered=len(ledger.answered),
            errors=errors,
            waiting=ledger.waiting(now, self.options.grace_s),
            lost=len(ledger.lost(now, self.options.grace_s)),
            logs_reread=self._reader.restarts if self._reader is not None else 0,
            interrupted=self._interrupted_at is not None,
        )

    async def _tick(self) -> None:
        while True:
            self.on_status(self.status())
            await asyncio.sleep(0.5)

    async def _close(self) -> None:
        await self.observer.stop()
        await self._log_ends.close()
        for client in (self._consumer, self._producer):
            if client is not None:
                await client.stop()
        self._consumer = self._producer = None

"""Ingest's Kafka wiring: a poll at a time from the ingest topics, routed and acked in bulk.

Three consumers, each over the partitions this instance owns: critical alone, interactive
and the shared `inferbus.ingest` in another, batch in the third, so a batch backlog never sits
in front of an interactive request, and a critical one never waits for the interactive lane's
paced fetches (gathered, or parked until the next burst of a rhythm; docs/kafka.md).

A poll's outcomes are produced without awaiting each send, then every ack is awaited; only
then are the poll's offsets committed. A send that still fails after the retries is
answered (`internal_error`) or dead-lettered, never dropped.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import signal
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TypeAlias

import numpy as np
import orjson
from aiokafka import ConsumerRecord
from aiokafka.structs import RecordMetadata

from infra.kafka import make_producer, start_with_retry
from infra.lenient_fetch import unreadable_reason
from infra.models.repository import ModelRepository
from infra.processes import StopDeadline
from infra.tasks import say_failure
from infra.topics import BROKER_EVENT_KEY, TopicKeeper, repository_topics
from schemas import headers as h
from schemas.errors import EngineError, Unparseable
from schemas.result import error_result
from schemas.topics import (
    DLQ,
    INGEST,
    INGEST_GROUP,
    INSTANCES,
    TIER_OF_INGEST_TOPIC,
    TIERS,
    ingest_topic,
)
from services.ingest.catalog import CachedModelCatalog, QueueDepths
from services.ingest.handlers import (
    Answer,
    DeadLetter,
    Outcome,
    Route,
    arrival,
    dead_letter_headers,
    failed_event,
    handle_event,
)
from services.ingest.lanes import LaneRouter
from services.ingest.settings import IngestSettings
from services.ingest.spans import IngestSpans
from services.runtime.consumer import ConsumerOptions, OwnedConsumer
from services.runtime.dead_letters import dead_letter_of, deliver_until_taken, undeliverable_result
from services.runtime.membership import Identity, Membership, default_instance_id
from services.runtime.offsets import OffsetTracker
from services.runtime.publisher import Outgoing, Publisher, error_text
from services.runtime.result_wire import result_headers
from tracing.attributes import RequestAttrs
from tracing.breakdown import record_stages
from tracing.health import HEALTH
from tracing.metrics import count_request, start_metrics_server
from tracing.sampling import TraceRef, new_trace, read_traceparent
from tracing.setup import init_tracing, sampling_ratio, shutdown_tracing, tracing_enabled
from tracing.telemetry import TelemetryPublisher

log = logging.getLogger(__name__)

ROUTE_PARTS_OF = 64
"""A poll's requests for one tier topic go in parts of at least this many over the
partitions handed the fewest (`RecordSpread`): the workers sharing the topic get even
shares of a large poll, for a record batch more a part (docs/kafka.md)."""

Record: TypeAlias = "ConsumerRecord[bytes, bytes]"

CRITICAL_TOPICS = (ingest_topic("critical"),)
HIGH_TOPICS = (ingest_topic("interactive"), INGEST)
LOW_TOPICS = (ingest_topic("batch"),)
PACED = ConsumerOptions(gather=True, rhythm=True)
"""Interactive and batch lanes: fewer, fuller fetches (docs/kafka.md)."""
STOP_LIMIT_S = 10.0
"""Most seconds a stop waits on the broker, all steps together: with the broker up it takes
well under one; with it away each step would wait the Kafka client's 30 s request timeout
(and a poll in hand retries until taken), and a stop took minutes (docs/operations.md)."""
NOTICE_S = 2.0
"""Most seconds a stop waits for each registry notice (draining, gone) and the last
heartbeat: courtesies, which the lease (`lease_s`) stands in for."""


class IngestService:
    """Validates and routes request events; one instance per process."""

    def __init__(self, bootstrap: str, settings: IngestSettings | None = None) -> None:
        self.settings = settings or IngestSettings()
        self.bootstrap = bootstrap
        self.instance_id = self.settings.instance_id or default_instance_id("ingest")
        self.limiter = self.settings.tenant_limiter()
        self.depths = QueueDepths(bootstrap, refresh_ms=self.settings.queue_refresh_ms)
        repository = ModelRepository(self.settings.models_dir)
        self.depths.watch_models(repository.names())
        self.catalog = CachedModelCatalog(
            repository,
            refresh_s=self.settings.model_refresh_s,
            depths=self.depths,
            served_tiers=self.settings.tiers,
        )
        self.counts: Counter[str] = Counter()
        self.producer = make_producer(bootstrap, client_id=self.instance_id)
        self.publisher = Publisher(
            self.producer,
            patience_s=self.settings.publish_patience_s,
            split_parts_of=ROUTE_PARTS_OF,
        )
        self.offsets = OffsetTracker()
        self.membership = Membership(
            self._send_and_wait,
            Identity(
                instance_id=self.instance_id,
                service="inferbus-ingest",
                model="",
                tiers=list(TIERS),
                groups=[INGEST_GROUP],
                started_at=datetime.now(UTC),
            ),
            lease_s=self.settings.lease_s,
        )
        self.router = LaneRouter(
            self.membership.rollouts, lambda: (self.membership.version, self.membership.table)
        )
        self.consumers = [
            self._consumer(HIGH_TOPICS, control=True),
            # Latency first: short busy waits, 1 byte asked, never parked.
            self._consumer(CRITICAL_TOPICS, control=False, options=ConsumerOptions(critical=True)),
            self._consumer(
                LOW_TOPICS,
                control=False,
                options=dataclasses.replace(PACED, batch_lane=True),
            ),
        ]
        self.ready = asyncio.Event()
        self.stopped = asyncio.Event()
        self.telemetry = TelemetryPublisher(
            self._send_telemetry, instance_id=self.instance_id, service="inferbus-ingest"
        )
        self.topics = (
            TopicKeeper(
                bootstrap,
                lambda: repository_topics(repository),
                announce=self._topics_recreated,
            )
            if self.settings.keep_topics
            else None
        )
        self._handled = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._polls: set[asyncio.Task[None]] = set()
        self._seen_restarts = 0
        self._started = False
        self._producer_up = False
        """The producer reached the broker: the registry can be told of a stop."""
        self._stopping = False

    def _consumer(
        self,
        topics: Sequence[str],
        *,
        control: bool,
        options: ConsumerOptions = PACED,
    ) -> OwnedConsumer:
        return OwnedConsumer(
            self.bootstrap,
            client_id=self.instance_id,
            membership=self.membership,
            groups=[(INGEST_GROUP, topic) for topic in topics],
            offsets=self.offsets,
            drain=self._drain,
            control=control,
            options=dataclasses.replace(options, max_poll_records=self.settings.poll_max_records),
        )

    # ---- lifecycle ---------------------------------------------------------------------

    def readiness(self) -> tuple[bool, str]:
        """(ready, why) for `/readyz`: started, not stopping, its lease fresh."""
        if self._stopping:
            return False, "stopping"
        if not self.ready.is_set():
            return False, "starting"
        if self.membership.lease_lapsed():
            return False, "registry lease lapsed (broker unreachable?)"
        return True, "ready"

    async def start(self) -> None:
        """Connect, register ready, take partitions, start polling (idempotent)."""
        if self._started:
            return
        self._started = True
        await start_with_retry(self.producer.start, what="ingest-producer")
        self._producer_up = True
        await self.depths.start()
        await self.membership.publish("ready")
        self.membership.start_refresh()
        for consumer in self.consumers:
            await consumer.start()
        self.telemetry.start()
        if self.topics is not None:
            self.topics.start()
        self._tasks = [
            asyncio.create_task(self._poll_loop(consumer), name=f"ingest-poll-{i}")
            for i, consumer in enumerate(self.consumers)
        ]
        for task in self._tasks:
            say_failure(task, log)
        self.ready.set()
        log.info("event=ingest_ready instance=%s bootstrap=%s", self.instance_id, self.bootstrap)

    async def stop(self) -> None:
        """Finish the polls in hand, commit, release every partition, deregister; idempotent.

        Bounded: what waits on the broker shares `STOP_LIMIT_S` (the registry notices and
        the last heartbeat `NOTICE_S` each) and is given up after it, said (a poll not
        answered by then is read again by the next ingest: delivery is at least once)."""
        if self._stopping or not self._started:
            self.stopped.set()
            return
        self._stopping = True
        deadline = StopDeadline("ingest", STOP_LIMIT_S)
        if self._producer_up:  # a start that never reached the broker has nothing to say
            await deadline.step(
                "registry_draining",
                self.membership.announce_leaving("draining"),
                "the draining notice (its lease says so instead)",
                most_s=NOTICE_S,
            )
        await deadline.end_tasks("loops_end", self._tasks, most_s=NOTICE_S)
        if self._polls:
            polls = list(self._polls)
            await deadline.step(
                "polls_in_flight",
                asyncio.gather(*polls, return_exceptions=True),
                f"{len(polls)} poll(s) being routed: not committed, read again after a restart",
            )
        for consumer in self.consumers:
            await deadline.step(
                "commit_and_release",
                consumer.close(),
                "the last commit of a consumer (its records are read again after a restart)",
            )
        await self.membership.stop_refresh()
        await deadline.step(
            "last_heartbeat", self.telemetry.stop(), "the last heartbeat", most_s=NOTICE_S
        )
        if self.topics is not None:
            await self.topics.stop()
        if self._producer_up:  # a start that never reached the broker has nothing to say
            await deadline.step(
                "registry_gone",
                self.membership.announce_leaving("gone"),
                "the gone notice (its lease says so instead)",
                most_s=NOTICE_S,
            )
        await self.depths.stop()
        await deadline.step("producer_flush", self.producer.stop(), "records not yet sent")
        log.info(
            "event=ingest_stopped instance=%s counts=%s gave_up=%s",
            self.instance_id,
            dict(self.counts),
            deadline.gave_up or "nothing",
        )
        self.stopped.set()

    async def _send_and_wait(self, topic: str, key: bytes, value: bytes) -> RecordMetadata:
        return await self.producer.send_and_wait(topic, value, key=key)

    async def _send_telemetry(self, topic: str, key: bytes, value: bytes) -> None:
        await self.producer.send_and_wait(topic, value, key=key)

    async def _topics_recreated(self, topics: list[str]) -> None:
        """Tell every instance (through the registry) that the logs started over."""
        event = orjson.dumps({"event": "topics_recreated", "topics": topics, "at": time.time()})
        [ack] = await self.publisher.send_all([Outgoing(INSTANCES, BROKER_EVENT_KEY, event, [])])
        if isinstance(ack, BaseException):
            raise ack

    async def _drain(self, topic: str, partitions: frozenset[int]) -> None:
        """Return once no record of these partitions is being routed."""
        while any(self.offsets.in_flight(topic, p) for p in partitions):
            self._handled.clear()
            await self._handled.wait()

    # ---- the hot path --------------------------------------------------------------------

    async def _poll_loop(self, consumer: OwnedConsumer) -> None:
        """Poll, and route each poll in its own task: the next poll does not wait for the
        last one's acks (at most `polls_in_flight` of them; commits stay in offset order)."""
        slots = asyncio.Semaphore(self.settings.polls_in_flight)
        while True:
            try:
                records = await consumer.poll(timeout_ms=500)
            except Exception as exc:  # a poll loop never dies in silence: said, then again
                log.error("event=poll_failed error=%r (retrying in 1 s)", exc)
                await asyncio.sleep(1.0)
                continue
            if self.membership.broker_restarts != self._seen_restarts:
                restarted = self.membership.restarted_since(self._seen_restarts)
                self._seen_restarts = self.membership.broker_restarts
                self.depths.forget(restarted)
            if not records:
                continue
            await slots.acquire()
            task = asyncio.create_task(self._handle_poll(records, consumer, slots))
            self._polls.add(task)
            task.add_done_callback(self._polls.discard)

    async def _handle_poll(
        self, records: Sequence[Record], consumer: OwnedConsumer, slots: asyncio.Semaphore
    ) -> None:
        try:
            await self.handle(records)
        except Exception as exc:  # only when even the DLQ path raised: said, loudly
            log.error(
                "event=poll_unanswered records=%d error=%r (redelivered after a restart)",
                len(records),
                exc,
                exc_info=exc,
            )
        finally:
            slots.release()
        consumer.request_commit()

    async def handle(self, records: Sequence[Record]) -> None:
        """Route, answer or dead-letter one poll's records; returns once all are acked.

        An event whose handling raises (a defect in ingest) is answered `internal_error`,
        or dead-lettered when it names no request; a failure while delivering the poll
        dead-letters every record of it. Either way each record is answered, its offset
        can be committed and a rebalance can drain it: nothing waits for a restart.
        """
        if self.limiter.active:
            # Tokens are taken at each record's own time (`limits.bucket_time`), so in time
            # order: a backlog fetched partition by partition is judged as it was sent. The
            # requests are independent; only who gets a token depends on the order.
            records = sorted(records, key=lambda record: record.timestamp)
        epochs = [self.offsets.polled(r.topic, r.partition, r.offset) for r in records]
        outcomes: list[Outcome] = []
        try:
            traces, spans = self._decide(records, outcomes)
            await self._deliver(records, outcomes, traces, spans)
        except Exception as exc:
            await self._poll_failed(records, outcomes, exc)
        for record, epoch in zip(records, epochs, strict=True):
            self.offsets.answered(record.topic, record.partition, record.offset, epoch)
        self._handled.set()

    def _decide(
        self, records: Sequence[Record], outcomes: list[Outcome]
    ) -> tuple[list[TraceRef], list[IngestSpans | None]]:
        """Each record's outcome, appended to `outcomes`; its trace and span returned."""
        now = datetime.now(UTC)
        tracing = tracing_enabled()
        ratio = sampling_ratio()
        traces: list[TraceRef] = []
        spans: list[IngestSpans | None] = []
        for record in records:
            span: IngestSpans | None = None
            try:
                trace = read_traceparent(record.headers) or new_trace(ratio)
                span = IngestSpans.start(record, trace) if tracing and trace.sampled else None
                lost = unreadable_reason(record.headers) if record.value is None else None
                if lost is not None:  # records the fetch could not read (infra.lenient_fetch)
                    outcome: Outcome = DeadLetter(b"", Unparseable(lost))
                else:
                    outcome = handle_event(
                        record.value,
                        produced_at=arrival(record.timestamp, now),
                        catalog=self.catalog,
                        settings=self.settings,
                        now=now,
                        limiter=self.limiter,
                        sent_to_tier=TIER_OF_INGEST_TOPIC.get(record.topic),
                        router=self.router,
                    )
            except Exception as exc:  # answered internal_error (or dead-lettered), not lost
                log.error(
                    "event=handling_failed topic=%s partition=%d offset=%d error=%r",
                    record.topic,
                    record.partition,
                    record.offset,
                    exc,
                    exc_info=exc,
                )
                trace = new_trace(0.0)
                outcome = failed_event(record.value, exc, elapsed_ms=0.0)
            if isinstance(outcome, Route):
                # Counted at once, so this poll's later requests see it before its ack.
                self.depths.reserve(outcome.topic)
            outcomes.append(outcome)
            traces.append(trace)
            spans.append(span)
        return traces, spans

    async def _deliver(
        self,
        records: Sequence[Record],
        outcomes: list[Outcome],
        traces: list[TraceRef],
        spans: list[IngestSpans | None],
    ) -> None:
        outgoing = [
            self._outgoing(record, outcome, trace, span)
            for record, outcome, trace, span in zip(records, outcomes, traces, spans, strict=True)
        ]
        acks = await self.publisher.send_all(outgoing)
        failed = [i for i, ack in enumerate(acks) if isinstance(ack, BaseException)]
        if failed:
            await self._undeliverable(records, outcomes, outgoing, acks, failed)
        self._account(records, outcomes, acks, spans)

    async def _poll_failed(
        self, records: Sequence[Record], outcomes: list[Outcome], exc: Exception
    ) -> None:
        """Dead-letter every record of a poll whose delivery raised, retried until taken.

        Some may have been routed or answered before the failure: the DLQ record says so,
        and a repeat is dropped by request id downstream.
        """
        log.error(
            "event=poll_failed records=%d error=%r (dead-lettering the poll)",
            len(records),
            exc,
            exc_info=exc,
        )
        for outcome in outcomes:
            if isinstance(outcome, Route):
                self.depths.release(outcome.topic)
        reason = (
            f"ingest failed while delivering this event's poll: {type(exc).__name__}: {exc} "
            "(it may also have been routed or answered)"
        )
        dead = [dead_letter_of(record, reason, code="internal_error") for record in records]
        await deliver_until_taken(self.publisher, dead)
        self.counts["dead_lettered"] += len(dead)

    def _outgoing(
        self, record: Record, outcome: Outcome, trace: TraceRef, span: IngestSpans | None
    ) -> Outgoing:
        if isinstance(outcome, Route):
            headers = outcome.headers
            if span is not None:
                request = outcome.request
                span.routed(
                    outcome.topic,
                    outcome.key,
                    RequestAttrs(
                        model=request.model, tier=request.tier, request_id=request.request_id
                    ),
                )
                headers.append((h.TRACEPARENT, span.traceparent()))
            else:
                headers.append((h.TRACEPARENT, trace.header))
            tracestate = h.header(record.headers, h.TRACESTATE)
            if tracestate:
                headers.append((h.TRACESTATE, tracestate.encode()))
            return Outgoing(outcome.topic, outcome.key, outcome.value, headers)
        if isinstance(outcome, Answer):
            headers = result_headers("frame" if outcome.framed else "list")
            headers.append(
                (h.TRACEPARENT, span.traceparent() if span is not None else trace.header)
            )
            if span is not None:
                span.failed(outcome.result.status)
            value = _encode_answer(outcome)
            return Outgoing(outcome.topic, outcome.key, value, headers)
        if span is not None:
            span.failed("unparseable")
        headers = dead_letter_headers(
            outcome,
            topic=record.topic,
            partition=record.partition,
            offset=record.offset,
            original=record.headers,
        )
        return Outgoing(DLQ, record.key, outcome.value, headers)

    async def _undeliverable(
        self,
        records: Sequence[Record],
        outcomes: list[Outcome],
        outgoing: list[Outgoing],
        acks: list[RecordMetadata | BaseException],
        failed: list[int],
    ) -> None:
        """A routed request gets `internal_error`; what still cannot be sent goes to the DLQ:
        an error answer as the result itself, a request as its own bytes.

        The DLQ is retried until it takes the record: when even that fails the broker is
        down, and nothing else could be sent either.
        """
        second: list[Outgoing] = []
        for index in failed:
            record, outcome, error = records[index], outcomes[index], acks[index]
            where = outgoing[index].topic
            reason = f"could not produce to {where}: {error_text(error)}"
            log.error(
                "event=undeliverable topic=%s partition=%d offset=%d reason=%r",
                record.topic,
                record.partition,
                record.offset,
                reason[:300],
            )
            if isinstance(outcome, Route):
                self.depths.release(outcome.topic)
                failure = EngineError(f"ingest could not route the request: {reason}")
                request = outcome.request
                result = error_result(
                    request.request_id,
                    request.model,
                    failure.status,
                    str(failure),
                    tenant=request.tenant,
                    completed_at=datetime.now(UTC),
                )
                value = result.model_dump_json(exclude_none=True).encode()
                answer = Outgoing(request.reply_to, outcome.key, value, result_headers("list"))
                [ack] = await self.publisher.send_all([answer])
                if not isinstance(ack, BaseException):
                    outcomes[index] = Answer(
                        request.reply_to, outcome.key, result, failure, tier=request.tier
                    )
                    acks[index] = ack
                    continue
                reason = f"{reason}; and the error result to {request.reply_to}: {ack!r}"
            if isinstance(outcome, Answer):
                answer = outgoing[index]
                second.append(
                    undeliverable_result(
                        answer.key,
                        answer.value,
                        reason,
                        topic=record.topic,
                        partition=record.partition,
                        offset=record.offset,
                    )
                )
                continue
            if isinstance(outcome, DeadLetter):  # its DLQ record again, code and reason kept
                second.append(outgoing[index])
                continue
            second.append(dead_letter_of(record, reason, code="undeliverable"))
        await deliver_until_taken(self.publisher, second)
        self.counts["dead_lettered"] += len(second)

    def _account(
        self,
        records: Sequence[Record],
        outcomes: list[Outcome],
        acks: list[RecordMetadata | BaseException],
        spans: list[IngestSpans | None],
    ) -> None:
        ingest_ms: dict[tuple[str, str], list[float]] = defaultdict(list)
        for outcome, ack, span in zip(outcomes, acks, spans, strict=True):
            if isinstance(outcome, Route):
                request = outcome.request
                if not isinstance(ack, BaseException):
                    self.depths.observe_ack(ack.topic, ack.partition, ack.offset)
                    self.counts["routed"] += 1
                ingest_ms[(request.model, request.tier)].append(_ingest_ms(outcome))
            elif isinstance(outcome, Answer):
                result = outcome.result
                self.counts[result.status] += 1
                model = metric_model(result.model, self.catalog.knows)
                count_request("inferbus-ingest", model, outcome.tier, result.status)
                log.info(
                    "event=request_rejected request_id=%s status=%s reason=%r",
                    result.request_id,
                    result.status,
                    outcome.error.message[:200],
                )
            else:
                self.counts["dead_lettered"] += 1
                log.info("event=dead_lettered reason=%r", outcome.error.message[:200])
            if span is not None:
                span.end(ack)
        for (model, tier), values in ingest_ms.items():
            record_stages(model, tier, {"ingest": np.asarray(values)})


def _ingest_ms(route: Route) -> float:
    for key, value in reversed(route.headers):
        if key == h.INGEST_MS:
            return float(value)
    return float("nan")


def _encode_answer(answer: Answer) -> bytes:
    value = answer.result.model_dump_json(exclude_none=True).encode()
    if not answer.framed:
        return value
    from schemas.frames import join_frame

    return join_frame(value)


async def run_ingest(bootstrap: str, settings: IngestSettings | None = None) -> None:
    """Run ingest until SIGTERM or SIGINT (a second signal exits at once)."""
    service = IngestService(bootstrap, settings)
    init_tracing("inferbus-ingest", instance_id=service.instance_id)
    start_metrics_server(service.settings.metrics_port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    signals = 0

    def on_signal() -> None:
        nonlocal signals
        signals += 1
        if signals > 1:
            os._exit(1)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    beat = HEALTH.serve(service.readiness)
    try:
        await service.start()
        await stop.wait()
    finally:
        beat.cancel()
        await service.stop()
        shutdown_tracing()


def metric_model(name: str, known: Callable[[str], bool]) -> str:
    """The `model` label of a rejected request: its name if the repository knows it, else
    `-`. Producers choose the names, and every distinct label is a series kept for the
    life of the process."""
    return name if known(name) else "-"

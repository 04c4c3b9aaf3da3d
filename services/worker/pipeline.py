"""The worker's hot path, top to bottom: poll, decode, batch, run, answer, commit.

A poll's records are decoded into the batcher; the engine loop hands the next due batch
to the engine thread while polling goes on; a batch's results are encoded in the form
each request came in, produced without awaiting each send, and their offsets committed
once every ack is in. Every record is answered exactly once: a result, a named error,
or (no request id to answer) a DLQ record. An answer path that raises answers what it
still owed `internal_error`; failing even that, those records are let go uncommitted
(redelivered), never left in hand.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiokafka import ConsumerRecord
from aiokafka.errors import MessageSizeTooLargeError
from aiokafka.structs import RecordMetadata

from infra.models.config import ModelConfig
from infra.tasks import wait_event
from schemas import headers as h
from schemas.errors import DeadlineExceeded, EngineError, InferbusError, Unparseable
from schemas.result import Status
from schemas.telemetry import WorkerLoad
from schemas.topics import Tier
from services.runtime.consumer import OwnedConsumer
from services.runtime.dead_letters import dead_letter_of, deliver_until_taken, undeliverable_result
from services.runtime.offsets import OffsetTracker
from services.runtime.publisher import Outgoing, Publisher, error_text
from services.runtime.result_wire import encode_result, result_headers
from services.worker.batching import Batch, Batcher
from services.worker.engine_clock import EngineClock
from services.worker.engine_host import EngineHost, Ran
from services.worker.execution import RequestOutcome
from services.worker.inhand import InHand, Tokenize, check_indices, decode_record
from services.worker.settings import WorkerSettings
from services.worker.spans import RequestSpans, batch_spans
from tracing.attributes import RequestAttrs
from tracing.breakdown import record_stages, with_sums
from tracing.metrics import count_request, observe_batch
from tracing.setup import tracing_enabled

log = logging.getLogger(__name__)


class WorkerDefect(InferbusError):
    """The worker raised where it should have answered: a bug in the worker. A record whose
    decoding raised goes to the DLQ with its bytes; a request whose answering raised is
    answered `internal_error`."""


_Key = tuple[str, int, int, int]
"""A record in hand: its topic, partition, offset, and its partition's epoch at poll."""
_Dead = tuple[ConsumerRecord[bytes, bytes], InferbusError, int]
"""A record bound for the DLQ: the record, why, and its partition's epoch at poll."""


EXPIRY_SWEEP_S = 0.25
"""How often requests waiting in the batcher are checked against their deadlines."""

EXPIRED_IN_QUEUE = DeadlineExceeded("deadline passed while queued")
"""The answer of a request whose deadline passed before it ran (in Kafka or the batcher)."""

ANSWERED_STAGES = (
    "queue",
    "batch_wait",
    "preprocess",
    "infer",
    "postprocess",
    "publish",
    "e2e",
)
"""Stages a successful request's histograms get (its result was sent without `publish`)."""
_STAGE_KEYS = tuple((stage, f"{stage}_ms") for stage in ANSWERED_STAGES)


@dataclass
class LoadCounters:
    """Counters folded into each heartbeat's WorkerLoad, then reset."""

    busy_s: float = 0.0
    batches: int = 0
    samples: int = 0
    since: float = field(default_factory=time.monotonic)


@dataclass(slots=True)
class _Answer:
    item: InHand
    status: Status
    outgoing: Outgoing
    timings: dict[str, float | None]


class Pipeline:
    """Everything between a worker's consumers and its producer."""

    def __init__(
        self,
        *,
        settings: WorkerSettings,
        instance_id: str,
        host: EngineHost,
        batcher: Batcher[InHand],
        publisher: Publisher,
        offsets: OffsetTracker,
        groups: dict[Tier, str],
        lease_lapsed: Callable[[], bool] = lambda: False,
    ) -> None:
        self.settings = settings
        self._lease_lapsed = lease_lapsed
        """The registry lease is lapsed now (a frozen or starved process, before anything
        renewed it): the partitions may be another worker's, which reads their uncommitted
        records again. Only while it is lapsed: once a consumer fenced and took partitions
        back, what is queued is theirs (a lapse counted earlier would let it go, and the
        consumer, reading on past it, would never read it again)."""
        self.instance_id = instance_id
        self.host = host
        self.batcher = batcher
        self.publisher = publisher
        self.offsets = offsets
        self.groups = groups
        self.counts: Counter[str] = Counter()
        self._owed: set[_Key] = set()
        """Records taken and not yet answered or let go: the worker's books."""
        self.wakeup = asyncio.Event()
        self.answered = asyncio.Event()
        """Set whenever records were answered (drains and backpressure wait on it)."""
        self.load = LoadCounters()
        self._engine_batches = 0
        self._slots = asyncio.Semaphore(settings.max_publishes_in_flight)
        self._tasks: set[asyncio.Task[None]] = set()
        self._consumers: list[OwnedConsumer] = []
        self._engine_clock = EngineClock()

    @property
    def in_hand(self) -> int:
        """Records taken and not yet answered or let go."""
        return len(self._owed)

    def took(self, topic: str, partition: int, offset: int) -> int:
        """A record taken in hand: owed an answer until answered or let go. Returns its
        partition's epoch to answer it with."""
        epoch = self.offsets.polled(topic, partition, offset)
        self._owed.add((topic, partition, offset, epoch))
        return epoch

    # ---- poll and decode ---------------------------------------------------------------

    async def poll_loop(self, tier: Tier, consumer: OwnedConsumer) -> None:
        """Poll one tier's owned partitions while there is room in hand."""
        self._consumers.append(consumer)
        limit = self.settings.max_in_hand
        while True:
            room = limit - self.in_hand
            if room <= 0 or self._queued_enough(tier):
                # The engine is behind: what waits stays in Kafka (no fetches), and the
                # consumer still follows its lease and the group's membership.
                self.answered.clear()
                await wait_event(self.answered, 0.1)
                await consumer.tend()
                continue
            try:
                records = await consumer.poll(timeout_ms=500, max_records=room)
            except Exception as exc:  # a poll loop never dies in silence: said, then again
                log.error("event=poll_failed tier=%s error=%r (retrying in 1 s)", tier, exc)
                await asyncio.sleep(1.0)
                continue
            if records:
                self.take(records, tier)
                self.wakeup.set()

    def _queued_enough(self, tier: Tier) -> bool:
        """Whether `tier` has `prefetch_batches` full batches queued beyond the engine's."""
        version = self.host.version
        batch = version.config.batching.max_batch_size if version is not None else 1
        return self.batcher.queued_samples(tier) >= self.settings.prefetch_batches * batch

    def take(self, records: Sequence[ConsumerRecord[bytes, bytes]], tier: Tier) -> None:
        """Decode a poll's records into the batcher; bad ones are answered on their own."""
        version = self.host.version
        assert version is not None
        decoded, dead = self._decode_all(records, tier, version.config, version.version)
        self._check_poll(decoded, version.config)
        now = time.monotonic()
        failed: list[tuple[InHand, InferbusError]] = []
        for item in decoded:
            if item.error is not None:
                failed.append((item, item.error))
            elif item.expired:
                # It needs no engine: answered now, so a backlog that expired in Kafka
                # drains at poll speed, not at the batcher's room per sweep.
                failed.append((item, EXPIRED_IN_QUEUE))
            else:
                self.batcher.add(item, tier=tier, samples=item.samples, length=item.length, now=now)
        if dead:
            self._spawn(self._dead_letter(dead), records=dead)
        if failed:
            self._spawn(self.answer_errors(failed), items=[item for item, _ in failed])

    def _decode_all(
        self,
        records: Sequence[ConsumerRecord[bytes, bytes]],
        tier: Tier,
        config: ModelConfig,
        served_version: str,
    ) -> tuple[list[InHand], list[_Dead]]:
        """Each record in hand (counted, its offset tracked) and decoded, or dead-lettered:
        no request id to answer, or a defect in decoding (said, with its bytes kept)."""
        tokenize, tracing = self.host.tokenize, tracing_enabled()
        decoded: list[InHand] = []
        dead: list[_Dead] = []
        for record in records:
            epoch = self.took(record.topic, record.partition, record.offset)
            try:
                item = self._decode(
                    record, tier, config, tokenize, tracing=tracing, served_version=served_version
                )
            except Unparseable as exc:
                dead.append((record, exc, epoch))
                continue
            except Exception as exc:  # a worker defect: dead-lettered with its bytes, said
                log.error(
                    "event=decode_crashed topic=%s partition=%d offset=%d error=%r",
                    record.topic,
                    record.partition,
                    record.offset,
                    exc,
                    exc_info=exc,
                )
                dead.append((record, WorkerDefect(f"{type(exc).__name__}: {exc}"), epoch))
                continue
            item.epoch = epoch
            decoded.append(item)
        return decoded, dead

    def _check_poll(self, decoded: list[InHand], config: ModelConfig) -> None:
        """The poll's token ids and table rows, checked together; a defect in the check
        answers each request it left `internal_error`, said."""
        try:
            check_indices(decoded, config, self.host.index_limits)
        except Exception as exc:
            log.error(
                "event=index_check_crashed records=%d error=%r", len(decoded), exc, exc_info=exc
            )
            for item in decoded:
                if item.indices_unchecked and item.error is None:
                    item.error = WorkerDefect(f"checking token ids failed: {exc!r}")

    def _decode(
        self,
        record: ConsumerRecord[bytes, bytes],
        tier: Tier,
        config: ModelConfig,
        tokenize: Tokenize | None,
        *,
        tracing: bool,
        served_version: str,
    ) -> InHand:
        item = decode_record(
            record,
            tier=tier,
            config=config,
            tokenize=tokenize,
            max_samples=config.batching.max_batch_size,
            index_limits=self.host.index_limits,
            served_version=served_version,
        )
        if tracing and item.trace is not None and item.trace.sampled:
            item.spans = RequestSpans.start(
                record,
                item.trace,
                group=self.groups[tier],
                attrs=self._attrs(item),
                polled_ns=item.polled_ns,
            )
        return item

    def _attrs(self, item: InHand) -> RequestAttrs:
        version, engine = self.host.version, self.host.engine
        return RequestAttrs(
            model=self.settings.model,
            tier=item.tier,
            model_version=version.version if version else None,
            request_id=item.request_id,
            provider=engine.info.provider if engine else None,
        )

    # ---- batches -----------------------------------------------------------------------

    async def engine_loop(self) -> None:
        """Form batches and hand them to the engine thread.

        Up to `engine_queue_depth` batches are in the engine's hands: one running, the next
        queued behind it, so the engine starts it the moment the last one ends. A batch only
        queues behind a running one when it is full; a partial batch is better formed when
        the engine frees up.
        """
        batcher, depth = self.batcher, self.settings.engine_queue_depth
        swept = time.monotonic()
        while True:
            now = time.monotonic()
            if now - swept >= EXPIRY_SWEEP_S and len(batcher):
                swept = now
                self._answer_expired(batcher.remove(lambda item: item.expired))
            batch = None
            full_only = self._engine_batches > 0
            if self._engine_batches < depth:
                batch = batcher.next_batch(now, full_only=full_only)
            if batch is None:
                # While a batch runs, a partial one waits for the engine (which wakes this
                # loop), not for its delay: a due partial batch would otherwise spin here.
                wait = (
                    batcher.next_due_in(now, full_only=full_only)
                    if self._engine_batches < depth
                    else None
                )
                if len(batcher):  # what waits is swept for expired requests now and then
                    wait = min(wait if wait is not None else EXPIRY_SWEEP_S, EXPIRY_SWEEP_S)
                self.wakeup.clear()
                # Idle, it sleeps until woken (a poll, an engine done): no busy ticking.
                await wait_event(self.wakeup, wait if wait is not None else 1.0)
                continue
            if self._lease_lapsed():
                self._let_go_queued(batch)
                continue
            live = [entry.item for entry in batch.entries if not entry.item.expired]
            if len(live) < len(batch.entries):
                self._answer_expired([e.item for e in batch.entries if e.item.expired])
            if not live:
                continue
            await self._slots.acquire()
            self._engine_batches += 1
            samples = sum(item.samples for item in live)
            self._hold_fetches(self._engine_clock.handed(samples, batch.pad_length))
            self._spawn(self._run_and_answer(batch, live), items=live, slot_taken=True)

    def _hold_fetches(self, needed_at: float | None) -> None:
        """Records fetched before the engine can take them only cost fetches: each
        consumer's fetches may wait until just before the engine frees."""
        for consumer in self._consumers:
            consumer.hold_fetches_until(needed_at)

    def _answer_expired(self, expired: list[InHand]) -> None:
        """Requests whose deadline passed before they ran: answered now, not when a batch
        would have reached them."""
        if expired:
            failures: list[tuple[InHand, InferbusError]] = [(i, EXPIRED_IN_QUEUE) for i in expired]
            self._spawn(self.answer_errors(failures), items=expired)

    async def _run_and_answer(self, batch: Batch[InHand], live: list[InHand]) -> None:
        batch_id = uuid.uuid4().hex[:16]
        dispatch_ns = time.time_ns()
        for item in live:
            item.batch_wait_ms = max(dispatch_ns - item.polled_ns, 0) / 1e6
            if item.spans is not None:
                item.spans.dispatched(
                    polled_ns=item.polled_ns,
                    dispatch_ns=dispatch_ns,
                    size=len(live),
                    batch_id=batch_id,
                )
        try:
            ran = await self.host.run(
                [item.arrays or {} for item in live],
                [item.samples for item in live],
                batch.pad_length,
            )
        except Exception as exc:  # answered as internal_error below, never lost
            log.error("event=batch_crashed size=%d error=%r", len(live), exc)
            failure = EngineError(f"the worker failed on this batch: {type(exc).__name__}")
            await self.answer_errors([(item, failure) for item in live])
            return
        finally:
            self._engine_batches -= 1
            self._hold_fetches(self._engine_clock.finished())
            self.wakeup.set()
        self._account_batch(batch, live, ran, batch_id)
        await self.answer(live, ran)

    def _account_batch(
        self, batch: Batch[InHand], live: list[InHand], ran: Ran, batch_id: str
    ) -> None:
        first = ran.outcomes[0]
        steps = (
            ("preprocess", first.assemble_ms),
            ("run", first.infer_ms),
            ("postprocess", first.split_ms),
        )
        sampled = [item.spans for item in live if item.spans is not None]
        if sampled:
            batch_spans(
                sampled,
                RequestAttrs(
                    model=self.settings.model,
                    tier=batch.tier,
                    model_version=ran.version.version,
                    provider=ran.engine.info.provider,
                    batch_id=batch_id,
                ),
                size=len(live),
                start_ns=ran.start_ns,
                steps_ms=steps,
                failed=any(outcome.error for outcome in ran.outcomes),
            )
        samples = sum(item.samples for item in live)
        busy_s = (first.assemble_ms + first.infer_ms + first.split_ms) / 1000
        self._engine_clock.ran(samples, busy_s, batch.pad_length)
        self.load.busy_s += busy_s
        self.load.batches += 1
        self.load.samples += samples
        observe_batch(self.settings.model, batch.tier, samples)

    # ---- answers -----------------------------------------------------------------------

    async def answer(self, items: list[InHand], ran: Ran) -> None:
        """Encode and publish a batch's results."""
        info, version = ran.engine.info, ran.version.version
        completed_at = _now_iso()
        answers = []
        for item, outcome in zip(items, ran.outcomes, strict=True):
            started = time.perf_counter()
            if outcome.outputs is not None:
                status: Status = "ok"
                error = None
            else:
                status, error = "internal_error", outcome.error or "engine failed"
            timings = self._timings(item, outcome)
            fields: dict[str, Any] = {
                "request_id": item.request_id,
                "model": item.model,
                "form": item.form,
                "model_version": version,
                "timings": timings,
                "batch_size": outcome.batch_size,
                "worker_id": self.instance_id,
                "provider": info.provider,
                "simulated": info.simulated,
                "tenant": item.tenant,
                "completed_at": completed_at,
            }
            try:
                value = encode_result(status=status, outputs=outcome.outputs, error=error, **fields)
            except Exception as exc:  # outputs the wire cannot carry: answered, not left
                log.error("event=result_encode_failed request_id=%s error=%r", item.request_id, exc)
                status = "internal_error"
                value = encode_result(
                    status=status,
                    error=f"the worker could not encode this request's outputs: {exc}",
                    **fields,
                )
            # Result encoding is the tail of postprocessing; e2e includes it.
            timings["postprocess_ms"] = (timings["postprocess_ms"] or 0.0) + (
                time.perf_counter() - started
            ) * 1000
            answers.append(_Answer(item, status, self._outgoing(item, value), timings))
        await self._publish(answers)

    async def answer_errors(self, failures: list[tuple[InHand, InferbusError]]) -> None:
        """Answer requests that end without running: bad input, expired, a crashed batch."""
        version = self.host.version
        completed_at = _now_iso()
        answers = []
        for item, error in failures:
            log.info(
                "event=request_error request_id=%s status=%s reason=%r",
                item.request_id,
                error.status,
                error.message[:200],
            )
            value = encode_result(
                request_id=item.request_id,
                model=item.model,
                status=error.status,
                form=item.form,
                error=str(error),
                model_version=version.version if version else None,
                timings=self._timings(item, None),
                worker_id=self.instance_id,
                tenant=item.tenant,
                completed_at=completed_at,
            )
            answers.append(_Answer(item, error.status, self._outgoing(item, value), {}))
        await self._publish(answers)

    def _outgoing(self, item: InHand, value: bytes) -> Outgoing:
        headers = result_headers(item.form)
        if item.spans is not None:
            headers.append((h.TRACEPARENT, item.spans.publishing(item.reply_to, item.request_id)))
        elif item.trace is not None:
            headers.append((h.TRACEPARENT, item.trace.header))
        if item.tracestate:
            headers.append((h.TRACESTATE, item.tracestate))
        return Outgoing(item.reply_to, item.request_id.encode(), value, headers)

    def _timings(self, item: InHand, outcome: RequestOutcome | None) -> dict[str, float | None]:
        now_ms = time.time() * 1000
        origin = item.produced_ms or item.record_ts_ms
        return {
            "ingest_ms": item.ingest_ms,
            "queue_ms": max(item.polled_at_s * 1000 - item.record_ts_ms, 0.0),
            "batch_wait_ms": item.batch_wait_ms,
            "preprocess_ms": item.preprocess_ms + (outcome.assemble_ms if outcome else 0.0),
            "infer_ms": outcome.infer_ms if outcome else None,
            "postprocess_ms": outcome.split_ms if outcome else None,
            "e2e_ms": max(now_ms - origin, 0.0),
        }

    async def _publish(self, answers: list[_Answer]) -> None:
        started = time.perf_counter()
        acks = await self.publisher.send_all([a.outgoing for a in answers])
        publish_ms = (time.perf_counter() - started) * 1000
        for answer in answers:
            answer.timings["publish_ms"] = publish_ms
        failed = []
        taken = []
        for answer, ack in zip(answers, acks, strict=True):
            if isinstance(ack, BaseException):
                failed.append((answer, ack))
            else:
                taken.append(_key(answer.item))
        # What the broker took is off the books before anything else can raise.
        self._settled(taken)
        if failed:
            await self._undeliverable(failed)
            self._settled(_key(answer.item) for answer, _ in failed)
        self._account_answers(answers, acks)

    async def _undeliverable(self, failed: list[tuple[_Answer, BaseException]]) -> None:
        """Results that outlived every attempt go to the DLQ, which is retried until it takes
        them (when even the DLQ fails, the broker is down and nothing else moves either)."""
        pending = []
        for answer, error in failed:
            item = answer.item
            value = answer.outgoing.value
            if isinstance(error, MessageSizeTooLargeError):
                replacement = self._too_large(answer, len(answer.outgoing.value))
                [ack] = await self.publisher.send_all([replacement])
                if not isinstance(ack, BaseException):
                    answer.status = "internal_error"
                    continue
                # The DLQ takes no more than the reply topic did: it gets the error result
                # (the headers name the request's topic, partition and offset).
                value = replacement.value
            reason = f"could not deliver the result to {item.reply_to}: {error_text(error)}"
            log.error("event=result_undeliverable request_id=%s reason=%r", item.request_id, reason)
            pending.append(
                undeliverable_result(
                    item.request_id.encode(),
                    value,
                    reason,
                    topic=item.topic,
                    partition=item.partition,
                    offset=item.offset,
                )
            )
        await deliver_until_taken(self.publisher, pending)
        self.counts["dead_lettered"] += len(pending)

    def _too_large(self, answer: _Answer, size: int) -> Outgoing:
        """An error result in place of one too large for the broker."""
        item = answer.item
        value = encode_result(
            request_id=item.request_id,
            model=item.model,
            status="internal_error",
            form=item.form,
            error=f"the result is {size} bytes, more than the broker takes "
            "(INFERBUS_KAFKA_MAX_BATCH_BYTES); ask for fewer samples per request",
            worker_id=self.instance_id,
            tenant=item.tenant,
            completed_at=_now_iso(),
        )
        return self._outgoing(item, value)

    def _account_answers(
        self, answers: list[_Answer], acks: Sequence[RecordMetadata | BaseException]
    ) -> None:
        by_status: Counter[tuple[str, str]] = Counter()
        stages: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        for answer, ack in zip(answers, acks, strict=True):
            item = answer.item
            by_status[(item.tier, answer.status)] += 1
            if answer.status == "ok":
                per_tier = stages[item.tier]
                for stage, key in _STAGE_KEYS:
                    value = answer.timings.get(key)
                    per_tier[stage].append(value if value is not None else float("nan"))
            if item.spans is not None:
                item.spans.end(ack, answer.status)
        for (tier, status), n in by_status.items():
            self.counts[status] += n
            count_request("inferbus-worker", self.settings.model, tier, status, n)
        for tier, values in stages.items():
            record_stages(self.settings.model, tier, with_sums(values))

    async def _dead_letter(self, records: list[_Dead]) -> None:
        outgoing = [
            dead_letter_of(
                record,
                str(error),
                code="unparseable" if isinstance(error, Unparseable) else "internal_error",
            )
            for record, error, _ in records
        ]
        await deliver_until_taken(self.publisher, outgoing)
        self._settled(map(_dead_key, records))
        self.counts["dead_lettered"] += len(records)
        for record, error, _ in records:
            log.info(
                "event=dead_lettered topic=%s offset=%d reason=%r",
                record.topic,
                record.offset,
                error.message[:200],
            )

    def _settled(self, keys: Iterable[_Key]) -> None:
        """Records answered (their results or DLQ records acked): off the books, and
        committable. A record no longer owed is skipped, so none is counted twice."""
        for key in keys:
            if key in self._owed:
                self._owed.discard(key)
                self.offsets.answered(*key)
        self.answered.set()
        self._request_commits()

    def _abandoned(self, keys: Iterable[_Key]) -> None:
        """Records let go unanswered: off the books, and commits stop short of them, so the
        partition's next reader gets them."""
        for key in keys:
            if key in self._owed:
                self._owed.discard(key)
                self.offsets.abandoned(*key)
        self.answered.set()

    def _request_commits(self) -> None:
        for consumer in self._consumers:
            consumer.request_commit()

    # ---- tasks, drains and load --------------------------------------------------------

    def _spawn(
        self,
        coro: Coroutine[Any, Any, None],
        *,
        items: Sequence[InHand] = (),
        records: Sequence[_Dead] = (),
        slot_taken: bool = False,
    ) -> None:
        """Run an answer task that owes `items` their answers and `records` their DLQ
        records; what it leaves owed when it raises is rescued, never stranded."""

        async def guarded() -> None:
            try:
                await coro
            except Exception as exc:
                await self._rescue(exc, items, records)
            finally:
                if slot_taken:
                    self._slots.release()

        task = asyncio.create_task(guarded())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _rescue(
        self, exc: Exception, items: Sequence[InHand], records: Sequence[_Dead]
    ) -> None:
        """An answer task raised (a worker defect): the requests it still owed are answered
        `internal_error`; failing even that, they and its DLQ records are let go
        uncommitted, so they are redelivered instead of lost or held in hand for good."""
        left = [item for item in items if _key(item) in self._owed]
        owed = [_key(item) for item in left]
        owed += [key for key in map(_dead_key, records) if key in self._owed]
        log.error("event=answer_task_failed requests=%d error=%r", len(owed), exc, exc_info=exc)
        if left:
            failure = WorkerDefect(
                f"the worker failed answering this request: {type(exc).__name__}"
            )
            try:
                await self.answer_errors([(item, failure) for item in left])
            except Exception as again:
                log.error("event=error_answer_failed requests=%d error=%r", len(left), again)
        unanswered = [key for key in owed if key in self._owed]
        if unanswered:
            log.error(
                "event=answers_abandoned requests=%d (left uncommitted: redelivered)",
                len(unanswered),
            )
            self._abandoned(unanswered)

    def _let_go_queued(self, batch: Batch[InHand]) -> None:
        """The lease lapsed with `batch` formed: it and everything queued go unanswered to
        the partitions' owners (read again from their commits), instead of being answered
        twice. Seen live: a worker frozen past its lease answered its whole queue again the
        moment it went on (101 and 401 repeats in `inferbus chaos -s worker-freeze`)."""
        dropped = [entry.item for entry in batch.entries] + self.batcher.remove(lambda _: True)
        for item in dropped:
            if item.spans is not None:
                item.spans.handed_over()
        self._abandoned(map(_key, dropped))
        log.warning(
            "event=lease_lapsed_queue_let_go instance=%s records=%d (not run: their next "
            "owner reads them again)",
            self.instance_id,
            len(dropped),
        )

    def let_go(self, topic: str, partitions: frozenset[int]) -> int:
        """Drop the queued records of these partitions (not yet in the engine): they go to
        the partitions' next owner unanswered, at once, instead of after this worker's
        backlog. Commits stop short of them. Returns how many were dropped."""
        dropped = self.batcher.remove(
            lambda item: item.topic == topic and item.partition in partitions
        )
        for item in dropped:
            if item.spans is not None:
                item.spans.handed_over()
        if dropped:
            self._abandoned(map(_key, dropped))
        return len(dropped)

    async def drain(self, topic: str, partitions: frozenset[int]) -> None:
        """Return once every record of these partitions in hand is answered."""
        while any(self.offsets.in_flight(topic, p) for p in partitions):
            self.wakeup.set()
            self.answered.clear()
            await wait_event(self.answered, 0.1)

    async def drain_all(self, timeout_s: float) -> None:
        """Answer everything in hand (a stop), within `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while self.in_hand > 0 and time.monotonic() < deadline:
            self.wakeup.set()
            self.answered.clear()
            await wait_event(self.answered, 0.1)
        if self.in_hand > 0:
            log.warning("event=drain_timeout left=%d (they will be redelivered)", self.in_hand)

    async def settle(self) -> None:
        """Wait for every answer task (after the loops stopped)."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def load_snapshot(self) -> WorkerLoad:
        """Load since the last snapshot (busy fraction, batch sizes, in hand); resets."""
        now = time.monotonic()
        counters, self.load = self.load, LoadCounters(since=now)
        elapsed = max(now - counters.since, 1e-9)
        return WorkerLoad(
            busy_fraction=min(counters.busy_s / elapsed, 1.0),
            batches=counters.batches,
            samples=counters.samples,
            mean_batch_size=counters.samples / counters.batches if counters.batches else 0.0,
            queued=self.in_hand,
            samples_per_s=counters.samples / counters.busy_s if counters.busy_s > 0 else 0.0,
            window_s=elapsed,
        )


def _key(item: InHand) -> _Key:
    return (item.topic, item.partition, item.offset, item.epoch)


def _dead_key(dead: _Dead) -> _Key:
    record, _, epoch = dead
    return (record.topic, record.partition, record.offset, epoch)


def _now_iso() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")

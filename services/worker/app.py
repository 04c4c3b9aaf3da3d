"""The worker: a raw aiokafka loop that polls tier topics, batches, runs the engine, answers.

Pipeline: pollers decode records into the batcher; one engine loop runs the next due
batch in a thread while pollers keep filling queues; publish tasks send the results
and commit offsets only after every result of those offsets is acked.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.errors import CommitFailedError, IllegalStateError, KafkaError
from aiokafka.structs import OffsetAndMetadata
from opentelemetry import trace

from infra.kafka import make_consumer, make_producer, start_with_retry
from infra.models.repository import ModelRepository, ModelVersion
from schemas import headers as h
from schemas.errors import DeadlineExceeded, EngineError, InferbusError, Unparseable
from schemas.result import ErrorInfo, InferenceResult, Timings
from schemas.telemetry import InstanceRecord, InstanceState, WorkerLoad
from schemas.tensors import Tensor
from schemas.topics import DLQ, INSTANCES, TIERS, Tier, request_topic, worker_group
from services.worker.batching import Batch, Batcher, BatchPolicy
from services.worker.engines.base import Engine
from services.worker.execution import RequestOutcome, run_batch
from services.worker.inhand import InHand, decode_record
from services.worker.offsets import OffsetTracker
from services.worker.settings import WorkerSettings
from tracing.attributes import RequestAttrs
from tracing.breakdown import record_stage
from tracing.kafka import (
    extract,
    infer_span,
    inject,
    kafka_timestamp_ns,
    record_error,
    set_delivery,
    start_process_span,
    start_send_span,
    timed_span,
)
from tracing.metrics import count_request, observe_batch, start_metrics_server
from tracing.setup import init_tracing, shutdown_tracing
from tracing.telemetry import TelemetryPublisher

log = logging.getLogger(__name__)
PROCESS_STARTED = time.time()
EngineFactory = Callable[[ModelVersion], Engine]


def default_engine_factory(model: ModelVersion) -> Engine:
    """The engine the model's config asks for."""
    from services.worker.engines.factory import create_engine

    return create_engine(model)


@dataclass
class LoadCounters:
    """Counters folded into each heartbeat's WorkerLoad, then reset."""

    busy_s: float = 0.0
    batches: int = 0
    samples: int = 0
    since: float = 0.0


def _timed_run_batch(*args: Any) -> tuple[int, list[RequestOutcome]]:
    """`run_batch` in the engine thread, with the wall-clock time it really started."""
    return time.time_ns(), run_batch(*args)


class WorkerFailed(InferbusError):
    """The worker could not publish results after retries and left its groups."""


class _Revocations(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, worker: Worker) -> None:
        self.worker = worker

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        await self.worker.handle_revoked(revoked)

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        log.info("event=partitions_assigned count=%d", len(assigned))
        await self.worker.report_assignment()


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
        self.engine_factory = engine_factory
        self.repository = ModelRepository(self.settings.models_dir)
        self.tiers: list[Tier] = [t for t in TIERS if t in self.settings.tiers]
        self.instance_id = (
            self.settings.instance_id
            or f"worker-{self.settings.model}-{socket.gethostname()}-{os.getpid()}"
        )
        self.ready = asyncio.Event()
        self.stopped = asyncio.Event()
        self.fatal: BaseException | None = None
        """Set when the worker had to give up (results it could not publish)."""
        self._stop_requested = asyncio.Event()
        self.counts: Counter[str] = Counter()
        self.engine: Engine | None = None
        self.version: ModelVersion | None = None
        self._producer: AIOKafkaProducer | None = None
        self._consumers: dict[Tier, AIOKafkaConsumer] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._publishes: set[asyncio.Task[None]] = set()
        self._publish_slots = asyncio.Semaphore(self.settings.max_publishes_in_flight)
        self._offsets = OffsetTracker()
        self._commit_lock = asyncio.Lock()
        self._engine_lock = asyncio.Lock()
        # One thread runs the engine: batches queue behind each other, never overlap.
        self._engine_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="engine")
        self._engine_runs: set[asyncio.Future[Any]] = set()
        self._engine_batches = 0
        self._wakeup = asyncio.Event()
        self._in_hand = 0
        self._paused: set[Tier] = set()
        self._draining = False
        self._started = False
        self._load = LoadCounters(since=time.monotonic())
        self._state: InstanceState = "loading"
        self._load_s: float | None = None
        self._warmup_s: float | None = None
        self._time_to_ready_s: float | None = None
        self._batcher: Batcher[InHand] | None = None
        self._tokenize: Callable[[list[str]], Any] | None = None
        self._telemetry: TelemetryPublisher | None = None

    async def _send_telemetry(self, topic: str, key: bytes, value: bytes) -> None:
        if self._producer is not None:
            await self._producer.send_and_wait(topic, value, key=key)

    # ---- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        """Load, warm up, register ready, then join the groups. Idempotent."""
        if self._started:
            return
        self._started = True
        self._producer = make_producer(self.bootstrap, client_id=self.instance_id)
        await start_with_retry(self._producer.start, what="producer")
        await self._register("loading")
        try:
            await self._load_engine()
        except InferbusError:
            await self._register("gone")
            raise
        config = self._config()
        batching = config.batching
        self._batcher = Batcher(
            BatchPolicy(
                max_batch_size=batching.max_batch_size,
                max_queue_delay_s=batching.max_queue_delay_ms / 1000,
                preferred_batch_sizes=tuple(batching.preferred_batch_sizes),
                length_buckets=tuple(batching.length_buckets),
                starvation_s=self.settings.starvation_ms / 1000,
            )
        )
        await self._register("ready")
        for tier in self.tiers:
            consumer = make_consumer(
                bootstrap=self.bootstrap,
                group_id=worker_group(self.settings.model, tier),
                client_id=self.instance_id,
                max_poll_records=self.settings.poll_max_records,
            )
            consumer.subscribe(
                [request_topic(self.settings.model, tier)], listener=_Revocations(self)
            )
            self._consumers[tier] = consumer  # before start: a cancelled start still closes it
            await start_with_retry(consumer.start, what=f"consumer-{tier}")
        self._tasks = [
            asyncio.create_task(self._poll_loop(tier), name=f"poll-{tier}") for tier in self.tiers
        ]
        self._tasks.append(asyncio.create_task(self._engine_loop(), name="engine"))
        self._tasks.append(asyncio.create_task(self._reload_loop(), name="reload"))
        self._telemetry = TelemetryPublisher(
            self._send_telemetry,
            instance_id=self.instance_id,
            service="inferbus-worker",
            model=self.settings.model,
            tiers=self.tiers,
            interval_s=self.settings.heartbeat_interval_s,
            load_provider=self.load_snapshot,
        )
        self._telemetry.start()
        self.ready.set()
        log.info(
            "event=worker_ready instance=%s model=%s version=%s tiers=%s provider=%s",
            self.instance_id,
            self.settings.model,
            self.version.version if self.version else None,
            ",".join(self.tiers),
            self.engine.info.label if self.engine else None,
        )

    def _config(self) -> Any:
        assert self.version is not None
        return self.version.config

    async def _load_engine(self) -> None:
        version = self.repository.resolve(self.settings.model, self.settings.model_version)
        engine = self.engine_factory(version)
        started = time.perf_counter()
        await asyncio.to_thread(engine.load)
        self._load_s = time.perf_counter() - started
        await self._register("warming")
        from services.worker.engines.shapes import warmup_batches

        started = time.perf_counter()
        await asyncio.to_thread(engine.warmup, warmup_batches(version.config))
        self._warmup_s = time.perf_counter() - started
        self.engine, self.version = engine, version
        self._tokenize = self._tokenizer_for(version)

    def _tokenizer_for(self, version: ModelVersion) -> Callable[[list[str]], Any] | None:
        if version.config.tokenizer is None:
            return None
        from infra.models.tokenize import TextTokenizer

        return TextTokenizer.for_model(version).encode

    async def run(self) -> None:
        """Start, then serve until SIGTERM/SIGINT (a second signal exits at once).

        A signal during start-up (loading, warming, joining) cancels the start and
        deregisters; it never leaves a half-started consumer behind.
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
                starting.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await starting
                log.info("event=start_cancelled instance=%s", self.instance_id)
            else:
                starting.result()  # a failed start (bad model, broker down) raises here
                await stopping
        finally:
            stopping.cancel()
            await self.stop(drain=self.fatal is None)
        if self.fatal is not None:
            raise WorkerFailed(f"worker gave up: {self.fatal!r}") from self.fatal

    async def stop(self, *, drain: bool = True) -> None:
        """Stop polling, finish in-hand work, commit, leave the groups, deregister."""
        if self._draining or not self._started:
            self.stopped.set()
            return
        self._draining = True
        await self._register("draining")
        for tier, consumer in self._consumers.items():
            consumer.pause(*consumer.assignment())
            self._paused.add(tier)
        if drain:
            deadline = time.monotonic() + self.settings.drain_timeout_s
            while self._in_hand > 0 and time.monotonic() < deadline:
                self._wakeup.set()
                await asyncio.sleep(0.02)
            if self._in_hand:
                log.warning("event=drain_timeout left=%d (they will be redelivered)", self._in_hand)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._publishes:
            await asyncio.gather(*self._publishes, return_exceptions=True)
        await self._commit()
        for consumer in self._consumers.values():
            await consumer.stop()
        self._consumers.clear()
        if self._telemetry is not None:
            await self._telemetry.stop()
        await self._register("gone")
        if self._producer is not None:
            await self._producer.stop()
        if self.engine is not None:
            await asyncio.to_thread(self.engine.unload)
        self._engine_thread.shutdown(wait=False)
        log.info("event=worker_stopped instance=%s counts=%s", self.instance_id, dict(self.counts))
        self.stopped.set()

    def _assigned_partitions(self) -> int:
        return sum(len(consumer.assignment()) for consumer in self._consumers.values())

    async def report_assignment(self) -> None:
        """Re-register with the partitions now assigned: the scaler counts a ready worker as
        serving only once it holds partitions (a group's rebalance can take seconds)."""
        if self._state == "ready":
            await self._register("ready")

    async def _register(self, state: InstanceState) -> None:
        self._state = state
        if self._producer is None:
            return
        now = datetime.now(UTC)
        if state == "ready" and self._time_to_ready_s is None:
            self._time_to_ready_s = time.time() - PROCESS_STARTED
        ready_in = self._time_to_ready_s if state == "ready" else None
        record = InstanceRecord(
            instance_id=self.instance_id,
            model=self.settings.model,
            tiers=self.tiers,
            group=worker_group(self.settings.model, self.tiers[0]),
            state=state,
            model_version=self.version.version if self.version else None,
            provider=self.engine.info.provider if self.engine else None,
            simulated=self.engine.info.simulated if self.engine else False,
            host=socket.gethostname(),
            pid=os.getpid(),
            started_at=datetime.fromtimestamp(PROCESS_STARTED, UTC),
            updated_at=now,
            load_s=self._load_s,
            warmup_s=self._warmup_s,
            time_to_ready_s=ready_in,
            partitions=self._assigned_partitions(),
        )
        await self._producer.send_and_wait(
            INSTANCES, record.model_dump_json().encode(), key=self.instance_id.encode()
        )

    # ---- polling ---------------------------------------------------------------------

    async def _poll_loop(self, tier: Tier) -> None:
        consumer = self._consumers[tier]
        while True:
            batches = await consumer.getmany(
                timeout_ms=100, max_records=self.settings.poll_max_records
            )
            config = self._config()  # per poll: a hot reload may have switched versions
            for records in batches.values():
                for record in records:
                    await self._take(record, tier, config)
            self._apply_backpressure()
            if batches:
                self._wakeup.set()

    async def _take(self, record: ConsumerRecord[bytes, bytes], tier: Tier, config: Any) -> None:
        assert self._batcher is not None
        self._offsets.polled(record.topic, record.partition, record.offset)
        self._in_hand += 1
        try:
            item = decode_record(
                record,
                tier=tier,
                config=config,
                tokenize=self._tokenize,
                max_samples=config.batching.max_batch_size,
            )
        except Unparseable as exc:
            self._spawn_publish(self._dead_letter(record, exc))
            return
        context = extract(record.headers)
        attrs = self._attrs(item)
        # The poll: the same reading as the result's queue_ms; processing starts there.
        polled_ns = int(item.polled_at_s * 1e9)
        timed_span(
            "queue",
            start_ns=kafka_timestamp_ns(record.timestamp),
            end_ns=polled_ns,
            stage="queue",
            parent=context,
            request=attrs,
        )
        item.span = start_process_span(
            record.topic,
            group=worker_group(self.settings.model, tier),
            partition=record.partition,
            offset=record.offset,
            key=record.key,
            context=context,
            request=attrs,
            start_ns=polled_ns,
        )
        if item.error is not None:
            self._spawn_publish(self._answer_errors([(item, item.error)]))
            return
        self._batcher.add(
            item, tier=tier, samples=item.samples, length=item.length, now=time.monotonic()
        )

    def _attrs(self, item: InHand, **extra: Any) -> RequestAttrs:
        return RequestAttrs(
            model=self.settings.model,
            tier=item.tier,
            model_version=self.version.version if self.version else None,
            request_id=item.request_id,
            provider=self.engine.info.provider if self.engine else None,
            **extra,
        )

    def _apply_backpressure(self) -> None:
        over = self._in_hand >= self.settings.max_in_hand
        for tier, consumer in self._consumers.items():
            if self._draining:
                continue
            if over and tier not in self._paused:
                consumer.pause(*consumer.assignment())
                self._paused.add(tier)
            elif not over and tier in self._paused:
                consumer.resume(*consumer.assignment())
                self._paused.discard(tier)

    # ---- engine ----------------------------------------------------------------------

    async def _engine_loop(self) -> None:
        """Form batches and hand them to the engine thread.

        Up to `engine_queue_depth` batches are in the engine's hands: one running, the next
        queued behind it, so the engine starts it the moment the last one ends instead of
        waiting for this loop to be scheduled. A batch only queues behind a running one
        when it is full; a partial batch is better formed when the engine frees up.
        """
        assert self._batcher is not None
        batcher = self._batcher
        depth = self.settings.engine_queue_depth
        while True:
            now = time.monotonic()
            batch = None
            if self._engine_batches < depth:
                batch = batcher.next_batch(now, full_only=self._engine_batches > 0)
            if batch is None:
                wait = batcher.next_due_in(now) if self._engine_batches < depth else None
                self._wakeup.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(
                        self._wakeup.wait(), timeout=wait if wait is not None else 0.1
                    )
                continue
            live: list[InHand] = []
            expired: list[InHand] = []
            for entry in batch.entries:
                (expired if entry.item.expired else live).append(entry.item)
            if expired:
                self._spawn_publish(
                    self._answer_errors(
                        [
                            (item, DeadlineExceeded("deadline passed while queued"))
                            for item in expired
                        ]
                    )
                )
            if not live:
                continue
            await self._publish_slots.acquire()
            self._engine_batches += 1
            self._spawn_publish(self._run_and_answer(batch, live), slot_taken=True)

    async def _run_and_answer(self, batch: Batch[InHand], live: list[InHand]) -> None:
        try:
            outcomes = await self._infer(batch, live)
        except Exception as exc:  # answered as internal_error below, never lost
            log.error("event=batch_crashed size=%d error=%r", len(live), exc)
            failure = EngineError(f"the worker failed on this batch: {type(exc).__name__}")
            await self._answer_errors([(item, failure) for item in live])
            return
        finally:
            self._engine_batches -= 1
            self._wakeup.set()
        await self._answer(live, outcomes)

    async def _infer(self, batch: Batch[InHand], live: list[InHand]) -> list[RequestOutcome]:
        batch_id = uuid.uuid4().hex[:16]
        dispatch_ns = time.time_ns()
        for item in live:
            # Poll to dispatch (a publish slot included), as the batch.wait span says.
            item.batch_wait_ms = max(dispatch_ns - item.polled_ns, 0) / 1e6
            if item.span is not None:
                timed_span(
                    "batch.wait",
                    start_ns=item.polled_ns,
                    end_ns=dispatch_ns,
                    stage="batch_wait",
                    parent=item.span,
                    request=self._attrs(item, batch_size=len(live), batch_id=batch_id),
                )
        async with self._engine_lock:  # the version switch swaps engines under this lock
            engine, version = self.engine, self.version
            assert engine is not None and version is not None
            future = asyncio.get_running_loop().run_in_executor(
                self._engine_thread,
                _timed_run_batch,
                engine.infer,
                [item.arrays or {} for item in live],
                [item.samples for item in live],
                version.config,
                batch.pad_length,
            )
            self._engine_runs.add(future)
        try:
            start_ns, outcomes = await future
        finally:
            self._engine_runs.discard(future)
        spans = [item.span for item in live if item.span is not None]
        shared = RequestAttrs(
            model=self.settings.model,
            tier=batch.tier,
            model_version=version.version,
            provider=engine.info.provider,
            batch_id=batch_id,
        )
        first = outcomes[0]
        with infer_span(spans, request=shared, start_ns=start_ns) as batch_span:
            cursor = start_ns
            for step, ms in (
                ("preprocess", first.assemble_ms),
                ("run", first.infer_ms),
                ("postprocess", first.split_ms),
            ):
                end = cursor + int(ms * 1_000_000)
                batch_span.timed_step(step, start_ns=cursor, end_ns=end)  # type: ignore[arg-type]
                cursor = end
            if any(outcome.error for outcome in outcomes):
                record_error(batch_span.span, "engine_error")
        samples = sum(item.samples for item in live)
        self._load.busy_s += (first.assemble_ms + first.infer_ms + first.split_ms) / 1000
        self._load.batches += 1
        self._load.samples += samples
        observe_batch(self.settings.model, batch.tier, samples)
        return outcomes

    # ---- answering -------------------------------------------------------------------

    def _spawn_publish(self, coro: Any, *, slot_taken: bool = False) -> None:
        async def guarded() -> None:
            try:
                await coro
            finally:
                if slot_taken:
                    self._publish_slots.release()

        task = asyncio.create_task(guarded())
        self._publishes.add(task)
        task.add_done_callback(self._publish_done)

    def _publish_done(self, task: asyncio.Task[None]) -> None:
        self._publishes.discard(task)
        if not task.cancelled() and task.exception() is not None:
            # `_publish` already retried. Its records stay uncommitted, so leaving the group
            # hands them to another worker (or to this one restarted): nothing is lost.
            self.fatal = task.exception()
            log.error("event=publish_failed_leaving error=%r", self.fatal)
            self._stop_requested.set()

    def _timings(self, item: InHand, outcome: RequestOutcome | None) -> Timings:
        now_ms = time.time() * 1000
        origin = item.produced_ms or item.record_ts_ms
        return Timings(
            ingest_ms=item.ingest_ms,
            queue_ms=max(item.polled_at_s * 1000 - item.record_ts_ms, 0.0),
            batch_wait_ms=item.batch_wait_ms,
            preprocess_ms=item.preprocess_ms + (outcome.assemble_ms if outcome else 0.0),
            infer_ms=outcome.infer_ms if outcome else None,
            postprocess_ms=outcome.split_ms if outcome else None,
            e2e_ms=max(now_ms - origin, 0.0),
        )

    async def _answer(self, items: list[InHand], outcomes: list[RequestOutcome]) -> None:
        assert self.version is not None and self.engine is not None
        info = self.engine.info
        results = []
        for item, outcome in zip(items, outcomes, strict=True):
            encode_started = time.perf_counter()
            if outcome.outputs is not None:
                outputs = {
                    name: Tensor.from_numpy(array, encoding=item.output_encoding)
                    for name, array in outcome.outputs.items()
                }
                status, error = "ok", None
            else:
                outputs, status = {}, "internal_error"
                error = ErrorInfo(code="internal_error", message=outcome.error or "engine failed")
            timings = self._timings(item, outcome)
            encode_ms = (time.perf_counter() - encode_started) * 1000
            timings = timings.model_copy(
                update={"postprocess_ms": (timings.postprocess_ms or 0.0) + encode_ms}
            )
            results.append(
                (
                    item,
                    InferenceResult(
                        request_id=item.request_id,
                        model=item.model,
                        model_version=self.version.version,
                        status=status,
                        error=error,
                        outputs=outputs,
                        timings=timings,
                        batch_size=outcome.batch_size,
                        worker_id=self.instance_id,
                        provider=info.provider,
                        simulated=info.simulated,
                        tenant=item.tenant,
                        completed_at=datetime.now(UTC),
                    ),
                )
            )
        await self._publish(results)

    async def _answer_errors(self, failures: list[tuple[InHand, InferbusError]]) -> None:
        results = [
            (
                item,
                InferenceResult(
                    request_id=item.request_id,
                    model=item.model,
                    model_version=self.version.version if self.version else None,
                    status=error.status,
                    error=ErrorInfo(code=error.status, message=str(error)),
                    timings=self._timings(item, None),
                    worker_id=self.instance_id,
                    tenant=item.tenant,
                    completed_at=datetime.now(UTC),
                ),
            )
            for item, error in failures
        ]
        for item, error in failures:
            log.info(
                "event=request_error request_id=%s status=%s reason=%r",
                item.request_id,
                error.status,
                error.message[:200],
            )
        await self._publish(results)

    async def _publish(self, results: list[tuple[InHand, InferenceResult]]) -> None:
        producer = self._producer
        assert producer is not None
        sends = []
        payloads = []
        for item, result in results:
            send = start_send_span(
                item.reply_to,
                key=item.request_id,
                request=self._attrs(item),
                stage="publish",
                parent=item.span,
            )
            headers = [(h.CONTENT_TYPE, h.JSON), (h.SCHEMA, h.RESULT_SCHEMA_V1)]
            inject(headers, trace.set_span_in_context(send))
            sends.append(send)
            payloads.append(
                (
                    item.reply_to,
                    result.model_dump_json(exclude_none=True).encode(),
                    item.request_id.encode(),
                    headers,
                )
            )
        try:
            acks = await self._send_all(producer, payloads)
        except Exception as exc:
            for span in sends:
                record_error(span, exc)
                span.end()
            raise
        for (item, result), send, ack in zip(results, sends, acks, strict=True):
            set_delivery(send, partition=ack.partition, offset=ack.offset)
            send.end()
            self.counts[result.status] += 1
            count_request("inferbus-worker", self.settings.model, item.tier, result.status)
            if result.timings.e2e_ms is not None:
                record_stage(self.settings.model, item.tier, "e2e", result.timings.e2e_ms)
            if item.span is not None:
                if result.status != "ok":
                    record_error(item.span, result.status)
                item.span.end()
            self._offsets.answered(item.topic, item.partition, item.offset)
            self._in_hand -= 1
        await self._commit()

    async def _send_all(
        self,
        producer: AIOKafkaProducer,
        payloads: list[tuple[str, bytes, bytes, list[tuple[str, bytes]]]],
    ) -> list[Any]:
        """Send and await every ack; on failure send all again (at-least-once), with backoff."""
        for attempt in range(1, self.settings.publish_attempts + 1):
            try:
                futures = [
                    await producer.send(topic, value, key=key, headers=headers)
                    for topic, value, key, headers in payloads
                ]
                return list(await asyncio.gather(*futures))
            except KafkaError as exc:
                if attempt == self.settings.publish_attempts:
                    raise
                delay = 0.2 * 2**attempt
                log.warning(
                    "event=publish_retry attempt=%d delay_s=%.1f error=%r", attempt, delay, exc
                )
                await asyncio.sleep(delay)
        raise AssertionError("unreachable")

    async def _dead_letter(self, record: ConsumerRecord[bytes, bytes], error: Unparseable) -> None:
        producer = self._producer
        assert producer is not None
        headers = h.dead_letter(
            str(error), topic=record.topic, partition=record.partition, offset=record.offset
        )
        await producer.send_and_wait(DLQ, record.value or b"", key=record.key, headers=headers)
        log.info(
            "event=dead_lettered topic=%s offset=%d reason=%r",
            record.topic,
            record.offset,
            error.message,
        )
        self.counts["dead_lettered"] += 1
        self._offsets.answered(record.topic, record.partition, record.offset)
        self._in_hand -= 1
        await self._commit()

    async def _commit(self) -> None:
        async with self._commit_lock:
            offsets = self._offsets.committable()
            if not offsets:
                return
            by_tier: dict[Tier, dict[TopicPartition, OffsetAndMetadata]] = {}
            for (topic, partition), offset in offsets.items():
                for tier, consumer in self._consumers.items():
                    tp = TopicPartition(topic, partition)
                    if (
                        topic == request_topic(self.settings.model, tier)
                        and tp in consumer.assignment()
                    ):
                        by_tier.setdefault(tier, {})[tp] = OffsetAndMetadata(offset, "")
            committed: dict[tuple[str, int], int] = {}
            for tier, tps in by_tier.items():
                try:
                    await self._consumers[tier].commit(tps)
                except (CommitFailedError, IllegalStateError) as exc:
                    # A rebalance took the partitions: results are out, the new owner may
                    # repeat some (the client drops repeats by request id).
                    log.warning("event=commit_skipped tier=%s reason=%r", tier, exc)
                    continue
                committed.update({(tp.topic, tp.partition): om.offset for tp, om in tps.items()})
            self._offsets.mark_committed(committed)

    async def handle_revoked(self, revoked: list[TopicPartition]) -> None:
        """Before partitions move: drop their queued requests, finish in-flight ones, commit.

        Dropped requests stay outstanding in the offset tracker, so the commit stops at
        the first of them and the new owner polls them again.
        """
        gone = {(tp.topic, tp.partition) for tp in revoked}
        dropped: list[InHand] = []
        if self._batcher is not None:
            dropped = self._batcher.remove(lambda item: (item.topic, item.partition) in gone)
        waiting = Counter((item.topic, item.partition) for item in dropped)
        deadline = time.monotonic() + 10
        # Bounded poll: the offset tracker is plain state with no change event to await.
        while time.monotonic() < deadline and any(  # noqa: ASYNC110
            self._offsets.in_flight(*key) > waiting[key] for key in gone
        ):
            await asyncio.sleep(0.01)
        await self._commit()
        for key in gone:
            self._offsets.forget(*key)
        self._in_hand -= len(dropped)
        log.info("event=partitions_revoked count=%d requeued=%d", len(revoked), len(dropped))

    # ---- telemetry and reload --------------------------------------------------------

    def load_snapshot(self) -> WorkerLoad:
        """Load since the last snapshot (busy fraction, batch sizes, in hand); resets."""
        now = time.monotonic()
        counters, self._load = self._load, LoadCounters(since=now)
        elapsed = max(now - counters.since, 1e-9)
        return WorkerLoad(
            busy_fraction=min(counters.busy_s / elapsed, 1.0),
            batches=counters.batches,
            samples=counters.samples,
            mean_batch_size=counters.samples / counters.batches if counters.batches else 0.0,
            queued=self._in_hand,
            samples_per_s=counters.samples / counters.busy_s if counters.busy_s > 0 else 0.0,
            window_s=elapsed,
        )

    async def _reload_loop(self) -> None:
        if self.settings.model_version is not None or self.settings.reload_check_s <= 0:
            return
        refused: set[str] = set()
        while True:
            await asyncio.sleep(self.settings.reload_check_s)
            versions = self.repository.versions(self.settings.model)
            current = self.version.version if self.version else None
            newest = versions[-1] if versions else None
            if newest is None or newest == current or newest in refused:
                continue
            try:
                await self._switch_to(newest)
            except Exception as exc:  # the old version keeps serving; logged, not raised
                refused.add(newest)
                log.error(
                    "event=reload_refused model=%s version=%s keeping=%s error=%r",
                    self.settings.model,
                    newest,
                    current,
                    exc,
                )

    async def _switch_to(self, version_name: str) -> None:
        from services.worker.engines.shapes import warmup_batches

        version = self.repository.resolve(self.settings.model, version_name)
        engine = self.engine_factory(version)
        await asyncio.to_thread(engine.load)
        await asyncio.to_thread(engine.warmup, warmup_batches(version.config))
        tokenize = self._tokenizer_for(version)
        async with self._engine_lock:
            old, self.engine, self.version, self._tokenize = self.engine, engine, version, tokenize
            on_old = set(self._engine_runs)
        if on_old:
            await asyncio.gather(*on_old, return_exceptions=True)
        if old is not None:
            await asyncio.to_thread(old.unload)
        await self._register("ready")
        log.info("event=version_switched model=%s version=%s", self.settings.model, version_name)


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
    try:
        await worker.run()
    finally:
        shutdown_tracing()

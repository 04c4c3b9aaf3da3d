"""`InferenceClient`: submit requests to `inferbus.ingest`, receive results from the reply topic."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import numbers
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from typing import Literal

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.errors import KafkaConnectionError, KafkaError, ProducerClosed
from pydantic import ValidationError

from infra.gaps import GapGuard, getmany_in_order
from infra.kafka import (
    check_bootstrap,
    make_consumer,
    make_producer,
    read_from_start,
    start_with_retry,
    stop_producer_within,
)
from infra.log_end import LogEndProbe, true_ends
from infra.lograte import limit_logger_rate
from infra.pacing import FetchPacer
from infra.tasks import end_and_say
from infra.topics import BROKER_EVENT_KEY
from schemas import headers as h
from schemas.errors import InferbusError, describe_validation_error
from schemas.frames import FrameError
from schemas.request import InferenceRequest
from schemas.result import InferenceResult
from schemas.topics import INSTANCES, RESULTS, Tier, ingest_topic, is_reply_topic
from services.client.pending import PendingRequests
from services.client.restarts import RestartDetector, resend_after_s, restart_suspects
from services.client.seen import SeenIds
from services.client.wire import InputValue, WireRequest, to_frame_inputs, to_wire_inputs
from services.runtime.publisher import Outgoing, Publisher
from tracing.attributes import RequestAttrs
from tracing.kafka import extract, inject, process_span, record_error, send_span, set_delivery
from tracing.sampling import read_traceparent
from tracing.setup import tracing_enabled

RESTART_WATCH_S = 60.0
"""For this long after a broker restart, requests left without a result are sent again."""
RESTART_CHECK_S = 1.0
"""How often the restart watch looks while it resends (otherwise every 2 s)."""
READER_RETRY_S = 0.1
"""The result reader's wait after a second failure in a row; it doubles with each more..."""
READER_RETRY_MAX_S = 5.0
"""...up to this (after a first failure it tries again at once)."""
STOP_FLUSH_S = 5.0
"""How long `stop` waits for the acks of requests sent and not yet acknowledged."""

log = logging.getLogger(__name__)

STREAM_KEPT = 10_000
"""Results kept for `results()` while nobody reads them; the oldest beyond go (counted)."""


NOT_STARTED = "InferenceClient is not started: use `async with` or start()"


def check_timeout_s(timeout_s: float) -> None:
    """ValueError unless `timeout_s` is a number of seconds > 0 (inf: no limit)."""
    number = isinstance(timeout_s, numbers.Real) and not isinstance(timeout_s, bool)
    if not (number and timeout_s > 0):  # NaN too
        raise ValueError(f"timeout_s must be a number of seconds > 0, not {timeout_s!r}")


class ReplyTopicMissing(InferbusError, RuntimeError):
    """The client's reply topic does not exist on the broker: nothing could reach it.
    (A RuntimeError too, as it was; an InferbusError, so a command says it on one line.)"""


class ClientStopped(RuntimeError):
    """The client was stopped: before this request's result came, or before this call."""


class InferenceClient:
    """Async client. `start()` before use (or `async with`); results are de-duplicated."""

    def __init__(
        self,
        bootstrap: str,
        *,
        reply_to: str = RESULTS,
        tenant: str | None = None,
        client_id: str | None = None,
        see_all_results: bool = False,
        patience_s: float = 30.0,
    ) -> None:
        check_bootstrap(bootstrap)
        if not is_reply_topic(reply_to):
            raise ValueError(
                f"reply_to {reply_to!r} is not a topic results may go to: a legal Kafka name "
                f"(letters, digits, '.', '_', '-'), {RESULTS} or {RESULTS}.<anything>, or "
                "any topic outside inferbus.*"
            )
        self.bootstrap = bootstrap
        self.reply_to = reply_to
        self.tenant = tenant
        self.client_id = client_id or f"inferbus-client-{uuid.uuid4().hex[:8]}"
        self.see_all_results = see_all_results
        self.patience_s = patience_s
        self._producer: AIOKafkaProducer | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._pacer: FetchPacer | None = None
        self._reader: asyncio.Task[None] | None = None
        self._positions: dict[TopicPartition, int] = {}
        """Per assigned partition, the offset after the last record the reader took: where
        a rebuilt consumer reads on."""
        self._waiters: dict[str, list[asyncio.Future[InferenceResult]]] = {}
        """Per request id, every `infer` awaiting it (an id sent again while its first
        `infer` waits gets the same result)."""
        self._stopped = False
        self._mine = PendingRequests()
        self._seen = SeenIds()
        self._stream: deque[InferenceResult] = deque()
        self._streamed = asyncio.Event()
        self.results_unread_dropped = 0
        """Results no `results()` reader took before `STREAM_KEPT` newer ones came."""
        self._publisher: Publisher | None = None
        self._pending: dict[str, WireRequest] = {}
        self._restarts = RestartDetector()
        self._registry: TopicPartition | None = None
        self._log_ends = LogEndProbe(bootstrap, client_id=self.client_id)
        """Tells a position inside the registry's last batch from one past its log."""
        self._notes: set[bytes] = set()
        self._background: set[asyncio.Task[None]] = set()
        self._watcher: asyncio.Task[None] | None = None
        self.duplicates_dropped = 0
        self.resubmitted = 0
        """Requests sent again because the broker may have lost them."""
        self._sent_at: dict[str, float] = {}
        """When each awaited request was last acked by the broker (monotonic)."""
        self._give_up_at: dict[str, float] = {}
        """When `infer` stops waiting for each awaited request (monotonic)."""
        self._restarted_at = -math.inf

    async def __aenter__(self) -> InferenceClient:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        """Connect, and position at the reply topic's end so no later result is missed (and
        no earlier one is read)."""
        if self._reader is not None:
            return
        self._stopped = False
        # The application's handlers are its own: only aiokafka's repeats are held back.
        limit_logger_rate("aiokafka")
        self._producer = make_producer(self.bootstrap, client_id=self.client_id)
        self._consumer = self._new_consumer()
        try:
            await start_with_retry(self._producer.start, what="client-producer")
            await start_with_retry(self._consumer.start, what="client-consumer")
            self._pace(self._consumer)
            partitions = await self._partitions(self.reply_to)
            # The registry's log too, from its end: it carries the note that the broker
            # lost its logs (and, one record per batch, its end offset tells a restart).
            # A cluster without it (a client of only some topics) goes without.
            if self._consumer.partitions_for_topic(INSTANCES):
                self._registry = TopicPartition(INSTANCES, 0)
                partitions.append(self._registry)
            # From each log's true end: the rest of a last batch of several records would
            # otherwise be read as new (old results yielded with see_all_results, an old
            # broker note taken for a restart and every reply log read again).
            ends = await true_ends(self._consumer, partitions)
            self._consumer.assign(partitions)
            for tp in partitions:
                self._consumer.seek(tp, ends[tp])
            self._positions = {tp: ends[tp] for tp in partitions}
        except KafkaConnectionError as exc:
            await self._close_unstarted()
            # aiokafka says only "Unable to bootstrap from [...]": say what to do about it.
            said = str(exc).removeprefix(f"{type(exc).__name__}: ")  # aiokafka names it
            raise KafkaConnectionError(
                f"cannot reach Kafka at {self.bootstrap}: start the stack (`inferbus up`) or "
                f"give the client the broker's address ({said})"
            ) from exc
        except BaseException:
            await self._close_unstarted()
            raise
        self._reader = asyncio.create_task(self._read(), name="client-results")
        self._publisher = Publisher(self._producer, patience_s=self.patience_s)
        self._watcher = asyncio.create_task(self._watch_restarts(), name="client-restarts")

    async def _close_unstarted(self) -> None:
        """A failed start leaves nothing open behind the caller's error."""
        assert self._consumer is not None and self._producer is not None
        await self._consumer.stop()
        await self._producer.stop()

    def _new_consumer(self) -> AIOKafkaConsumer:
        """The result consumer, not started. No group: every client sees every result on
        its reply topic and keeps its own."""
        return make_consumer(bootstrap=self.bootstrap, group_id=None, client_id=self.client_id)

    def _pace(self, consumer: AIOKafkaConsumer) -> None:
        """Have the started result consumer's fetches paced by what this client awaits."""
        self._pacer = FetchPacer(
            consumer, expecting=self._expecting, rhythm=True, critical=self._mine.any_urgent_due
        )
        self._pacer.attach()

    async def _partitions(self, topic: str) -> list[TopicPartition]:
        assert self._consumer is not None
        for _ in range(50):
            found = self._consumer.partitions_for_topic(topic)
            if found:
                return [TopicPartition(topic, p) for p in sorted(found)]
            await self._consumer.topics()
            await asyncio.sleep(0.1)
        raise ReplyTopicMissing(
            f"reply topic {topic!r} does not exist at {self.bootstrap}; create it first "
            f"(`inferbus topics create --reply-topic {topic}`), or start the stack, which "
            "makes inferbus.results"
        )

    async def stop(self, *, flush_timeout_s: float = STOP_FLUSH_S) -> None:
        """Disconnect; pending `infer()` calls raise ClientStopped, a `results()` loop ends,
        and later calls raise ClientStopped. The consumer and producer are closed whatever a
        background task ended with (that is logged). Stopping twice is harmless.

        Requests sent and not yet acknowledged get `flush_timeout_s` for their acks; then
        they are given up (said in the log; their `submit` or `infer` raises ClientStopped:
        each may or may not have reached the broker)."""
        self._stopped = True
        self._publisher = None
        self._streamed.set()  # a `results()` reader waiting for the next one sees the stop
        reader, self._reader = self._reader, None
        watcher, self._watcher = self._watcher, None
        async with contextlib.AsyncExitStack() as closing:
            # Run last to first, each whatever the one before raised.
            if self._producer is not None:
                closing.push_async_callback(self._stop_producer, self._producer, flush_timeout_s)
            closing.push_async_callback(self._log_ends.close)
            closing.push_async_callback(self._stop_consumer)  # the one the reader ended with
            for task in (reader, watcher, *self._background):
                await end_and_say(task, log)
            for request_id, futures in self._waiters.items():
                for future in futures:
                    if not future.done():
                        future.set_exception(
                            ClientStopped(
                                f"the client stopped before request {request_id} was answered"
                            )
                        )
            self._waiters.clear()

    async def _stop_producer(self, producer: AIOKafkaProducer, flush_timeout_s: float) -> None:
        if not await stop_producer_within(producer, flush_timeout_s):
            log.warning(
                "event=client_stop_gave_up client=%s flush_timeout_s=%g (requests the broker "
                "had not acknowledged were given up: they may or may not have reached it)",
                self.client_id,
                flush_timeout_s,
            )

    async def _stop_consumer(self) -> None:
        if self._consumer is not None:
            await self._consumer.stop()

    def build_request(
        self,
        model: str,
        inputs: Mapping[str, InputValue],
        *,
        tier: Tier = "interactive",
        request_id: str | None = None,
        timeout_ms: int | None = None,
        model_version: str | None = None,
        metadata: Mapping[str, str] | None = None,
        form: Literal["frame", "json"] = "frame",
    ) -> WireRequest:
        """A request with this client's reply topic and tenant.

        `form`: a binary frame (raw tensor bytes after a small JSON envelope; the default,
        the cheapest to encode and decode) or plain JSON with base64 tensors.
        """
        if form not in ("frame", "json"):
            raise ValueError(f"form must be 'frame' or 'json', not {form!r}")
        payload: tuple[bytes, ...] | None = None
        if form == "frame":
            wire, parts = to_frame_inputs(inputs)
            payload = tuple(parts)
        else:
            wire = to_wire_inputs(inputs)
        try:
            envelope = InferenceRequest(
                request_id=uuid.uuid4().hex if request_id is None else request_id,
                model=model,
                model_version=model_version,
                tier=tier,
                inputs=wire,
                timeout_ms=timeout_ms,
                reply_to=self.reply_to,
                tenant=self.tenant,
                created_at=datetime.now(UTC),
                metadata=dict(metadata or {}),
            )
        except ValidationError as exc:  # the field and what is wrong, not pydantic's dump
            raise ValueError(f"request: {describe_validation_error(exc)}") from None
        return WireRequest(envelope, payload)

    async def submit(self, request: WireRequest | InferenceRequest) -> str:
        """Fire and forget: produce the request (acks=all) to its tier's ingest topic and
        return its id. A broker that is away, or takes the record and never acks it, is
        waited for (`patience_s`, at least 2 s for the last try's ack), then the error is
        raised."""
        wire = request if isinstance(request, WireRequest) else WireRequest(request)
        # An id answered before and sent again by the caller awaits a new answer, not a
        # repeat to drop (`infer` of the same request twice timed out).
        self._seen.discard(wire.request_id)
        return await self._produce(wire)

    async def _produce(self, wire: WireRequest) -> str:
        publisher = self._require_publisher()
        envelope = wire.envelope
        now = datetime.now(UTC)
        deadline = envelope.effective_deadline(now)
        due_in_s = None if deadline is None else (deadline - now).total_seconds()
        self._mine.add(
            envelope.request_id, deadline_in_s=due_in_s, urgent=envelope.tier == "critical"
        )
        value, content_type = wire.encode()
        headers: list[tuple[str, bytes]] = [
            (h.CONTENT_TYPE, content_type),
            (h.SCHEMA, h.REQUEST_SCHEMA_V1),
        ]
        topic = ingest_topic(envelope.tier)
        key = (envelope.tenant or envelope.request_id).encode()
        attrs = RequestAttrs(
            model=envelope.model, tier=envelope.tier, request_id=envelope.request_id
        )
        with send_span(topic, key=key, request=attrs) as span:
            inject(headers)
            [ack] = await publisher.send_all([Outgoing(topic, key, value, headers)])
            if isinstance(ack, BaseException):
                self._mine.not_sent(envelope.request_id)
                if self._stopped and isinstance(ack, ProducerClosed):  # given up by stop()
                    raise ClientStopped(
                        f"the client stopped before the broker acknowledged request "
                        f"{envelope.request_id}: it may or may not have reached it"
                    ) from ack
                raise ack
            set_delivery(span, partition=ack.partition, offset=ack.offset)
        self._restarts.acked((ack.topic, ack.partition), ack.offset)
        if envelope.request_id in self._pending:
            self._sent_at[envelope.request_id] = time.monotonic()
        return envelope.request_id

    async def _registry_overrun(self) -> bool:
        """Whether the registry's log now ends before our position: the broker lost its
        logs. A position past the reported end is only a suspect (Tansu reports the last
        batch's first offset + 1, short of a position inside a batch of several records):
        the last batch is read, as the services' consumers do, and only a position past
        its last offset counts."""
        consumer, registry = self._consumer, self._registry
        assert consumer is not None
        if registry is None:
            return False
        try:
            end = (await consumer.end_offsets([registry]))[registry]
            position = await consumer.position(registry)
        except KafkaError:
            return False  # away: asked again next round
        if position <= end:
            return False
        verdict = await self._log_ends.judge({registry: end}, {registry: position})
        return bool(verdict.past)

    async def _broker_restarted(self) -> None:
        """Read the (new) reply logs from their start, and send again what awaits a result."""
        consumer = self._consumer
        assert consumer is not None
        log.warning("event=broker_restart_detected reply_topic=%s", self.reply_to)
        self._restarts = RestartDetector()
        self._restarted_at = time.monotonic()
        read_from_start(consumer, *consumer.assignment())
        self._positions = dict.fromkeys(self._positions, 0)
        self._resubmit_pending()

    def _resubmit_pending(self, *, every_one: bool = True) -> None:
        """The broker started over (it lost its log): requests awaiting a result may be gone
        with it. Send them again under the same ids; a repeat is dropped by id.
        `every_one=False`: only those that have waited `resend_after_s` since their last
        ack."""
        now = time.monotonic()
        again = [
            wire
            for request_id, wire in self._pending.items()
            if every_one or self._resend_due(request_id, now)
        ]
        if not again:
            return
        log.warning("event=resubmitting count=%d", len(again))
        self.resubmitted += len(again)
        for wire in again:
            if wire.request_id in self._sent_at:
                self._sent_at[wire.request_id] = now  # a resend in flight is not sent again
            task = asyncio.create_task(self._resubmit(wire))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    def _resend_due(self, request_id: str, now: float) -> bool:
        sent_at = self._sent_at.get(request_id)
        if sent_at is None:
            return False  # its send is not acked yet
        give_up_at = self._give_up_at.get(request_id)
        left_s = None if give_up_at is None else give_up_at - now
        return now - sent_at >= resend_after_s(left_s)

    async def _resubmit(self, wire: WireRequest) -> None:
        try:
            await self._produce(wire)
        except KafkaError as exc:  # the waiting infer() reports the timeout with its id
            log.warning("event=resubmit_failed request_id=%s error=%r", wire.request_id, exc)
        except Exception as exc:
            # Not the broker being away (an aiokafka AssertionError, say): its caller gets
            # it now; were it raised here, nobody would await this task to see it.
            waiters = [f for f in self._waiters.get(wire.request_id, ()) if not f.done()]
            for waiter in waiters:
                waiter.set_exception(exc)
            if not waiters:
                log.exception("event=resubmit_failed request_id=%s error=%r", wire.request_id, exc)

    async def _watch_restarts(self, every_s: float = 2.0) -> None:
        """While results are awaited, ask whether the broker lost its logs: the registry's
        log, or an ingest partition we wrote to, then ends before our position there. Then
        read the reply logs from their start and resubmit."""
        while True:
            watching = time.monotonic() - self._restarted_at < RESTART_WATCH_S
            await asyncio.sleep(min(every_s, RESTART_CHECK_S) if watching else every_s)
            if not self._pending or self._consumer is None:
                continue
            try:
                await self._watch_once(watching=watching)
            except KafkaError as exc:  # a consumer being rebuilt, a broker away
                log.warning("event=restart_watch_failed error=%r (again next round)", exc)
            except Exception as exc:
                log.exception("event=restart_watch_failed error=%r (again next round)", exc)

    async def _watch_once(self, *, watching: bool) -> None:
        if watching:
            # A restarted broker can still lose records written in its first seconds
            # (Tansu acks some it cannot serve): what waits too long is sent again.
            self._resubmit_pending(every_one=False)
        if await self._registry_overrun() or await self._ingest_logs_restarted():
            await self._broker_restarted()

    async def _ingest_logs_restarted(self) -> bool:
        """Whether an ingest partition we wrote to now ends before an offset acked there
        (ends never go back otherwise), judged against the log's last batch."""
        consumer = self._consumer
        assert consumer is not None and self._producer is not None
        acked = self._restarts.snapshot()  # before the ends: later acks may pass them
        # The producer's metadata knows the ingest topics (the consumer's only the replies).
        cluster = self._producer.client.cluster
        tps = [
            TopicPartition(topic, p)
            for topic, p in acked
            if p in (cluster.partitions_for_topic(topic) or ())
        ]
        try:
            ends = await consumer.end_offsets(tps)
        except KafkaError:
            return False  # away: asked again next round
        suspects = restart_suspects(acked, {(tp.topic, tp.partition): e for tp, e in ends.items()})
        if not suspects:
            return False
        verdict = await self._log_ends.judge(
            {TopicPartition(*tp): end for tp, end in suspects.items()},
            {TopicPartition(*tp): acked[tp] + 1 for tp in suspects},
        )
        return bool(verdict.past)

    async def infer(
        self, request: WireRequest | InferenceRequest, *, timeout_s: float = 30.0
    ) -> InferenceResult:
        """Submit and await the result; TimeoutError names the request id. ValueError for a
        `timeout_s` that is not a number > 0, or a request whose `reply_to` is not this
        client's reply topic (its result would never reach this client)."""
        check_timeout_s(timeout_s)
        wire = request if isinstance(request, WireRequest) else WireRequest(request)
        if wire.envelope.reply_to != self.reply_to:
            raise ValueError(
                f"request {request.request_id} answers to {wire.envelope.reply_to!r}, but this "
                f"client reads {self.reply_to!r}: build it with build_request(), or set its "
                "reply_to to the client's"
            )
        self._require_publisher()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[InferenceResult] = loop.create_future()
        self._waiters.setdefault(request.request_id, []).append(future)
        self._pending[request.request_id] = wire
        self._give_up_at[request.request_id] = time.monotonic() + timeout_s
        # One timeout over the send and the wait, in this task: `wait_for` ran the send as a
        # task of its own, whose late error nobody retrieved ("Future exception was never
        # retrieved" after the caller had its TimeoutError).
        deadline = None if math.isinf(timeout_s) else loop.time() + timeout_s
        try:
            async with asyncio.timeout_at(deadline):
                await self.submit(wire)
                return await future
        except TimeoutError:
            raise TimeoutError(
                f"no result for request {request.request_id} within {timeout_s:g} s"
            ) from None
        finally:
            if future.done() and not future.cancelled():
                future.exception()  # a reader's error given to it is seen, even if unraised
            self._forget_waiter(request.request_id, future)

    def _forget_waiter(self, request_id: str, future: asyncio.Future[InferenceResult]) -> None:
        """One `infer` of `request_id` is over; the id's tracking goes with its last one."""
        futures = self._waiters.get(request_id, [])
        if future in futures:
            futures.remove(future)
        if futures:
            return
        self._waiters.pop(request_id, None)
        self._pending.pop(request_id, None)
        self._sent_at.pop(request_id, None)
        self._give_up_at.pop(request_id, None)

    async def results(self) -> AsyncIterator[InferenceResult]:
        """Results as they arrive that no `infer` call is awaiting: those of `submit`ted
        requests, and late ones of an `infer` that gave up (or every result on the reply
        topic, with see_all_results). A result `infer` returns is not yielded again. Unread,
        the newest `STREAM_KEPT` are kept (`results_unread_dropped` counts the rest).
        RuntimeError on a client never started (nothing would ever come)."""
        if self._reader is None and not self._stopped:
            raise RuntimeError(NOT_STARTED)
        while True:
            while not self._stream:
                if self._stopped:
                    return
                self._streamed.clear()
                await self._streamed.wait()
            yield self._stream.popleft()

    async def _read(self) -> None:
        """Read results until stopped. A KafkaError is aiokafka's fetcher dying (it does not
        come back by itself): a fresh consumer reads on where this one stopped. Any other
        error fails every waiting `infer` with it (an error now, not a timeout later), and
        reading goes on."""
        gaps = GapGuard()
        broken = False
        failures = 0
        while True:
            try:
                if broken:
                    await self._rebuild_consumer()
                    broken = False
                await self._read_once(gaps)
            except KafkaError as exc:
                broken = True
                log.warning(
                    "event=client_consumer_broken client=%s error=%r (rebuilding)",
                    self.client_id,
                    exc,
                )
            except Exception as exc:
                log.exception(
                    "event=client_reader_failed client=%s error=%r (waiting requests fail)",
                    self.client_id,
                    exc,
                )
                self._fail_waiters(exc)
            else:
                failures = 0
                continue
            failures += 1
            await asyncio.sleep(reader_retry_s(failures))

    async def _rebuild_consumer(self) -> None:
        """A fresh consumer in place of the broken one, at the positions the reader reached:
        results written meanwhile are read, not skipped (as reading from the end would)."""
        with contextlib.suppress(Exception):  # it is broken: only its closing is at stake
            if self._consumer is not None:
                await self._consumer.stop()
        consumer = self._new_consumer()
        try:
            await start_with_retry(consumer.start, what="client-consumer")
            # Taken after the start: a broker restart seen meanwhile set them to 0.
            positions = dict(self._positions)
            consumer.assign(list(positions))
            for tp, offset in positions.items():
                consumer.seek(tp, offset)
        except BaseException:
            await consumer.stop()  # a failed try leaves nothing open; the next makes its own
            raise
        self._consumer = consumer
        self._pace(consumer)
        log.info("event=client_consumer_rebuilt client=%s", self.client_id)

    def _fail_waiters(self, exc: Exception) -> None:
        for futures in self._waiters.values():
            for future in futures:
                if not future.done():
                    future.set_exception(exc)

    async def _read_once(self, gaps: GapGuard) -> None:
        consumer = self._consumer
        assert consumer is not None
        batches = await getmany_in_order(consumer, gaps, timeout_ms=200)
        results = 0
        # The consumer has moved past every record of the poll: one whose handling raises
        # does not cost the others theirs.
        undelivered: Exception | None = None
        restart_error: Exception | None = None
        for tp, records in batches.items():
            self._positions[tp] = records[-1].offset + 1
            if tp.topic == INSTANCES:
                if any(self._broker_note(r) for r in records):
                    try:
                        await self._broker_restarted()
                    except Exception as exc:  # raised once the poll's results are delivered
                        restart_error = exc
                continue
            results += len(records)
            for record in records:
                try:
                    self._deliver(record)
                except Exception as exc:
                    log.exception(
                        "event=result_not_delivered topic=%s partition=%d offset=%d error=%r "
                        "(waiting requests fail)",
                        record.topic,
                        record.partition,
                        record.offset,
                        exc,
                    )
                    undelivered = exc
        if self._pacer is not None:
            self._pacer.observe(results)
        if undelivered is not None:
            # Whose result it was may be unknown: every waiting `infer` gets the error now,
            # not a timeout later (as for any reader error).
            self._fail_waiters(undelivered)
        if restart_error is not None:
            raise restart_error

    @property
    def results_overdue(self) -> int:
        """This client's requests that got no result by their deadline plus a grace (each
        is logged; a result that still comes later is delivered)."""
        return self._mine.lapsed_total

    def _expecting(self) -> bool:
        """Whether results of this client's requests are still to come (its reader then
        never idles: the first result after a quiet spell is not held by an idle wait)."""
        return self._mine.any_due() or bool(self._waiters)

    def _broker_note(self, record: ConsumerRecord[bytes, bytes]) -> bool:
        """A new note that topics were made. Every one is taken as a possible restart: a
        resend costs a repeat (dropped by id), a missed restart a lost request (a note
        naming only a new model's topics once left a request sent while the broker was
        down unanswered)."""
        if record.key != BROKER_EVENT_KEY or record.value in self._notes:
            return False
        self._notes.add(record.value or b"")
        return True

    def _deliver(self, record: ConsumerRecord[bytes, bytes]) -> None:
        if record.value is None:
            return
        try:
            result = InferenceResult.from_wire(record.value)
        except (ValidationError, FrameError) as exc:
            log.warning("event=bad_result_on_reply_topic topic=%s error=%s", self.reply_to, exc)
            return
        ours = result.request_id in self._mine or result.request_id in self._waiters
        if not (ours or self.see_all_results):
            # A repeat of one of our results arrives after its id left `_mine`: count it.
            if result.request_id in self._seen:
                self.duplicates_dropped += 1
            return
        trace = read_traceparent(record.headers)
        if tracing_enabled() and trace is not None and trace.sampled:
            with process_span(
                record.topic,
                group=self.client_id,
                partition=record.partition,
                offset=record.offset,
                key=record.key,
                context=extract(record.headers),
                request=RequestAttrs(model=result.model, request_id=result.request_id),
            ) as span:
                if result.status != "ok":
                    record_error(span, result.status)
        # Answered, first time or again: a repeat's id may be pending once more (sent again
        # after a broker restart).
        self._mine.answered(result.request_id)
        if not self._seen.add(result.request_id):
            self.duplicates_dropped += 1
            return
        waiters = [f for f in self._waiters.get(result.request_id, ()) if not f.done()]
        if waiters:
            # `infer` returns it; the stream would keep it for a `results()` reader that an
            # infer-only client never has, one result per request for the client's life.
            for waiter in waiters:
                waiter.set_result(result)
            return
        if len(self._stream) >= STREAM_KEPT:
            # Nobody reads them (a client that submits and never iterates `results()`):
            # the oldest goes, said, rather than the client's memory.
            self._stream.popleft()
            self.results_unread_dropped += 1
            dropped = self.results_unread_dropped
            if dropped in (1, 10, 100) or dropped % 1000 == 0:
                log.warning(
                    "event=results_unread_dropped count=%d kept=%d (read results() to get them)",
                    dropped,
                    STREAM_KEPT,
                )
        self._stream.append(result)
        self._streamed.set()

    def _require_publisher(self) -> Publisher:
        if self._stopped:
            raise ClientStopped("InferenceClient is stopped: start() it again, or use a new one")
        if self._publisher is None:
            raise RuntimeError(NOT_STARTED)
        return self._publisher


def reader_retry_s(failures: int) -> float:
    """The result reader's wait after its `failures`-th failure in a row: none after the
    first (a broken consumer is rebuilt at once), then `READER_RETRY_S` doubling up to
    `READER_RETRY_MAX_S`, so an error that stays does not spin the loop."""
    if failures <= 1:
        return 0.0
    return min(READER_RETRY_MAX_S, READER_RETRY_S * 2.0 ** (failures - 2))

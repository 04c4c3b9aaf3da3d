"""Kafka client factories with the settings every inferbus process shares."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.conn import collect_hosts
from aiokafka.errors import KafkaConnectionError, ProducerClosed

from infra import lenient_fetch
from infra.security import (
    KafkaSecurity,
    KafkaSecurityError,
    KafkaSecuritySettings,
    broker_security,
    resolve,
)
from infra.security_probe import explain_refusal, plain_listener, tls_on_a_plain_listener
from infra.settings import kafka_settings
from infra.tasks import cancel_and_wait, own_cancels

log = logging.getLogger(__name__)
T = TypeVar("T")


def check_bootstrap(bootstrap: str) -> None:
    """ValueError naming the entry unless `bootstrap` is `host[:port]` entries, comma-separated,
    each port from 1 to 65535, as aiokafka reads them: it raised its own ValueError (a port's
    `int()`) from inside `start()`, and took port 70000 until it failed to connect."""
    for entry in bootstrap.split(","):
        try:
            hosts = collect_hosts(entry)
        except ValueError:
            hosts = []
        if not all(host and 0 < port <= 65535 for host, port, _ in hosts) or not hosts:
            raise ValueError(
                f"bootstrap {bootstrap!r}: {entry.strip()!r} is not host[:port] with a "
                "numeric port from 1 to 65535 ([addr]:port for IPv6)"
            )


def _never_create_topics_by_asking() -> None:
    """inferbus clients never create a topic by asking for its metadata.

    aiokafka sends every metadata request with `allow_auto_topic_creation` true and has
    no setting for it; a broker that creates topics on demand (Tansu does, with 4
    partitions) then makes wrong-sized topics out of a producer's or consumer's question
    (after a broker restart, before the topics are provisioned again). Topics are
    provisioned with their sizes (`infra.topics`); everything else waits for them.
    """
    from aiokafka.protocol import metadata

    if getattr(metadata.MetadataRequest, "_inferbus_no_auto_create", False):
        return
    original = metadata.MetadataRequest.__init__

    def init(
        self: Any, topics: list[str] | None = None, allow_auto_topic_creation: bool | None = None
    ) -> None:
        original(
            self, topics, False if allow_auto_topic_creation is None else allow_auto_topic_creation
        )

    metadata.MetadataRequest.__init__ = init
    metadata.MetadataRequest._inferbus_no_auto_create = True


_never_create_topics_by_asking()


EARLY_PROBE_S = 5.0
"""A TLS client's start still waiting after this long asks whether the broker's listener
is plain text (aiokafka's own start waits out its request timeout, 40 s, first)."""


class _ExplainsRefusal:
    """A client whose failed `start()` says which security setting the broker refused."""

    _bootstrap: str
    _security: KafkaSecurity

    async def start(self) -> None:
        starting = asyncio.ensure_future(super().start())  # type: ignore[misc]
        try:
            early = await self._early_refusal(starting)
        except BaseException:  # the caller's cancellation: the start goes with it
            starting.cancel()
            raise
        if early is not None:
            await cancel_and_wait(starting)
            raise early
        try:
            await starting
        except Exception as exc:
            refusal = await explain_refusal(self._bootstrap, self._security)
            if refusal is None:
                raise
            raise refusal from exc

    async def _early_refusal(self, starting: asyncio.Future[None]) -> KafkaSecurityError | None:
        """A TLS client's start still waiting after `EARLY_PROBE_S` on a plain listener."""
        if not self._security.settings.tls:
            return None
        done, _ = await asyncio.wait({starting}, timeout=EARLY_PROBE_S)
        if done:
            return None
        where = await plain_listener(self._bootstrap)
        if where is None or starting.done():
            return None
        return tls_on_a_plain_listener(where, self._security)


class SecureProducer(_ExplainsRefusal, AIOKafkaProducer):  # type: ignore[misc]
    """An AIOKafkaProducer with the security options applied (built by `make_producer`)."""

    def __init__(self, security: KafkaSecurity, **options: Any) -> None:
        super().__init__(**options)
        self._bootstrap, self._security = options["bootstrap_servers"], security


class SecureConsumer(_ExplainsRefusal, AIOKafkaConsumer):  # type: ignore[misc]
    """An AIOKafkaConsumer with the security options applied (built by `make_consumer`)."""

    def __init__(self, *topics: str, security: KafkaSecurity, **options: Any) -> None:
        super().__init__(*topics, **options)
        self._bootstrap, self._security = options["bootstrap_servers"], security

    async def stop(self) -> None:
        """`AIOKafkaConsumer.stop`, closing its connections even when aiokafka's own fetch
        task's cancellation escapes it.

        aiokafka 0.14's `Fetcher.close` cancels its pending fetch requests and awaits each
        bare: one waiting out a retry backoff (a broker gone away) raises CancelledError out
        of `stop()` before the client's connections are closed. Leaving `async with
        InferenceClient(...)` after the stack stopped crashed that way."""
        before = own_cancels()
        try:
            await super().stop()
        except asyncio.CancelledError:
            if own_cancels() > before:
                raise  # the caller's own cancellation
            log.debug("event=consumer_stop_fetch_cancelled (closing the rest)")
            fetcher = self._fetcher
            pending = [
                *([fetcher._fetch_task] if fetcher is not None else []),
                *(getattr(fetcher, "_pending_tasks", ()) if fetcher is not None else ()),
            ]
            for fetch in pending:
                fetch.cancel()
            if pending:
                await asyncio.wait(pending)  # their cancellation is theirs, not raised here
            await self._client.close()


class SecureAdmin(_ExplainsRefusal, AIOKafkaAdminClient):  # type: ignore[misc]
    """An AIOKafkaAdminClient with the security options applied (built by `make_admin`)."""

    def __init__(self, security: KafkaSecurity, **options: Any) -> None:
        super().__init__(**options)
        self._bootstrap, self._security = options["bootstrap_servers"], security


def make_producer(
    bootstrap: str,
    *,
    client_id: str = "inferbus",
    security: KafkaSecuritySettings | None = None,
    **overrides: Any,
) -> AIOKafkaProducer:
    """A producer that waits for all in-sync replicas (acks=all).

    Idempotence stays off: Tansu has no InitProducerId; at-least-once plus request-id
    dedup at the client gives the same guarantee users see. No compression: on loopback
    and LAN the CPU costs more than the bytes. `security` defaults to the process's
    `INFERBUS_KAFKA_*` settings (infra.security), as for every factory here.
    """
    settings = kafka_settings()
    secure = resolve(security)
    options: dict[str, Any] = {
        "bootstrap_servers": bootstrap,
        "client_id": client_id,
        "acks": "all",
        "enable_idempotence": False,
        "linger_ms": settings.linger_ms,
        "max_batch_size": settings.max_batch_bytes,
        "max_request_size": settings.max_request_bytes,
        "request_timeout_ms": settings.request_timeout_ms,
    }
    options.update(secure.options)
    options.update(overrides)
    return SecureProducer(secure, **options)


FETCHER_RECHECK_MS = 1_000
"""How often aiokafka's background fetcher looks again when nothing woke it (its default:
200 ms). Every event it acts on wakes it at once (a fetch answered, records consumed, a
seek, a pause lifted, an assignment changed); this recheck only finds nothing to do, and
at 5 a second on every consumer it was a third of an idle process's event-loop wakeups."""


def make_consumer(
    *topics: str,
    bootstrap: str,
    group_id: str | None,
    client_id: str = "inferbus",
    security: KafkaSecuritySettings | None = None,
    **overrides: Any,
) -> AIOKafkaConsumer:
    """A consumer with explicit commits only (`enable_auto_commit=False`), reading records
    aiokafka's reader refuses too (`infra.lenient_fetch`)."""
    lenient_fetch.install()
    settings = kafka_settings()
    secure = resolve(security)
    options: dict[str, Any] = {
        "bootstrap_servers": bootstrap,
        "client_id": client_id,
        "group_id": group_id,
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        "max_partition_fetch_bytes": settings.partition_fetch_bytes,
        "fetch_max_bytes": 8 * settings.partition_fetch_bytes,
        "fetch_max_wait_ms": settings.fetch_wait_busy_ms,
        "consumer_timeout_ms": FETCHER_RECHECK_MS,
        "request_timeout_ms": settings.request_timeout_ms,
        # A worker that dies is noticed within 10 s; one that leaves says so at once.
        "session_timeout_ms": 10_000,
        "heartbeat_interval_ms": 1_000,
    }
    options.update(secure.options)
    options.update(overrides)
    return SecureConsumer(*topics, security=secure, **options)


def make_admin(
    bootstrap: str,
    *,
    client_id: str = "inferbus-admin",
    security: KafkaSecuritySettings | None = None,
    **overrides: Any,
) -> AIOKafkaAdminClient:
    """An admin client (topics, offsets); `start()` it, `close()` it."""
    secure = resolve(security)
    options: dict[str, Any] = {"bootstrap_servers": bootstrap, "client_id": client_id}
    options.update(secure.options)
    options.update(overrides)
    return SecureAdmin(secure, **options)


def make_broker(
    bootstrap: str, *, client_id: str, security: KafkaSecuritySettings | None = None
) -> Any:
    """A FastStream `KafkaBroker` with the equivalent `security=` object."""
    from faststream.kafka import KafkaBroker

    return KafkaBroker(bootstrap, client_id=client_id, security=broker_security(resolve(security)))


START_ATTEMPTS = 20
"""How often a client's start is tried while the broker is still coming up (0.25 s apart,
within attempts × 0.25 s: see `start_with_retry`)."""


async def start_with_retry(
    start: Callable[[], Awaitable[T]],
    *,
    what: str,
    attempts: int = START_ATTEMPTS,
    delay_s: float = 0.25,
) -> T:
    """Start a Kafka client, retrying while the broker is still coming up.

    A broker coming up refuses connections at once: tries go on for `attempts` × `delay_s`
    in all. A failed try that took longer than that (something answers on the port but
    not as Kafka, or a broker that hangs: aiokafka gives up on each after its request
    timeout) is not tried again: 20 of them held `inferbus infer` silent for 12 minutes.
    """
    give_up_at = time.monotonic() + attempts * delay_s
    for attempt in range(1, attempts + 1):
        try:
            return await start()
        except KafkaConnectionError as exc:
            if attempt == attempts or time.monotonic() >= give_up_at:
                raise
            log.info("event=kafka_retry what=%s attempt=%d error=%r", what, attempt, exc)
            await asyncio.sleep(delay_s)
    raise AssertionError("unreachable")


def read_from_start(consumer: AIOKafkaConsumer, *partitions: TopicPartition) -> None:
    """Position each partition at its log's first record, without a broker round trip.

    Offset 0 is the first record of a log nothing was trimmed from (every log of a broker
    that just came back without its state, which is what callers read again); a trimmed
    log answers 0 with out-of-range, and a consumer whose `auto_offset_reset` is
    "earliest" (the default of `make_consumer`) takes it to its first kept record.
    `seek_to_beginning` instead asks the broker (ListOffsets) and waits for the answer, up
    to the 30 s request timeout, inside the caller's poll loop: on a broker that has just
    come back, that is a wait the loop need not take."""
    for tp in partitions:
        consumer.seek(tp, 0)


SENDER_SETTLE_S = 1.0
"""After a producer's connections closed in a stop given up, the most its sender gets to
put back the batches whose requests failed with them and end."""


async def stop_producer_within(producer: AIOKafkaProducer, timeout_s: float) -> bool:
    """`producer.stop()` (send what waits, await its acks, close), given up after
    `timeout_s`: its connections are closed then, and what is still unacknowledged fails
    with ProducerClosed (not retriable: a `Publisher` does not try it again) once its
    sender has ended (`SENDER_SETTLE_S` at most). False when it was given up.

    aiokafka's `stop` has no limit of its own: a broker that froze (its sockets open, no
    answers) held a client's stop for the request timeout, 30 s."""
    stopping = asyncio.ensure_future(producer.stop())
    done, _ = await asyncio.wait({stopping}, timeout=timeout_s)
    if stopping in done:
        stopping.result()
        return True
    # The sender, cancelled, waits for its requests in flight: they fail as their
    # connections close, it puts their batches back (after its retry backoff), and waits
    # for a metadata update that the closed client will never make: released here, so
    # that it ends (and takes nothing with it into the background).
    sender_task = producer._sender.sender_task
    if sender_task is not None:
        sender_task.cancel()
    await producer.client.close()
    loop = asyncio.get_running_loop()
    settle_by = loop.time() + SENDER_SETTLE_S
    while sender_task is not None and not sender_task.done() and loop.time() < settle_by:
        _release_metadata_waiters(producer)
        await asyncio.sleep(0.05)
    if sender_task is not None and not sender_task.done():
        # Still waiting for a request in flight (one connecting again to the frozen
        # broker waits out the request timeout): cancelled again, it stops waiting.
        sender_task.cancel()
        await asyncio.wait({sender_task}, timeout=SENDER_SETTLE_S)
    # Failed only now: a batch failed before its request's failure put it back made
    # aiokafka 0.14 raise KeyError in its callback.
    _fail_unacknowledged(
        producer, ProducerClosed(f"not acknowledged when the producer stopped ({timeout_s:g} s)")
    )
    done, _ = await asyncio.wait({stopping}, timeout=SENDER_SETTLE_S)
    if stopping not in done:
        await cancel_and_wait(stopping)
        log.warning("event=producer_stop_abandoned (its sender did not end)")
    elif not stopping.cancelled():  # the sender's cancellation, ours, ends it that way
        stopping.result()
    return False


def _release_metadata_waiters(producer: AIOKafkaProducer) -> None:
    """Resolve the metadata update the producer's closed client was to make (its
    synchroniser is cancelled): whoever waits on it goes on."""
    update = producer.client._md_update_fut
    if update is not None and not update.done():
        update.set_result(None)


def _fail_unacknowledged(producer: AIOKafkaProducer, error: Exception) -> None:
    """Fail every batch the producer holds (queued, put back, or in flight): whoever awaits
    one gets `error` now. aiokafka's `fail_all` is not used: a batch sent once has a
    callback that takes it out of the in-flight set when it fails, and one put back is
    not in that set (KeyError, in aiokafka 0.14's callback); its batches' drain waiters,
    which nobody awaits once it stops, were logged as never retrieved."""
    accumulator = producer._message_accumulator
    held = set(accumulator._pending_batches)
    for queue in accumulator._batches.values():
        held.update(queue)
    accumulator._pending_batches.update(held)
    for batch in held:
        batch.failure(error)
        if not batch._drain_waiter.cancelled():
            batch._drain_waiter.exception()


async def stop_consume_loop(task: asyncio.Task[None] | None, consumer: Any) -> None:
    """Cancel a consume loop and stop its consumer (either may be None; idempotent)."""
    if task is not None and not task.done():
        await cancel_and_wait(task)
    if consumer is not None:
        await consumer.stop()


async def committed_offsets(
    consumer: AIOKafkaConsumer, tps: Sequence[TopicPartition]
) -> dict[TopicPartition, int | None]:
    """The consumer's group's committed offset of each of `tps` (None: none committed).

    One OffsetFetch request for all of them: aiokafka's `committed()` asks one partition
    per request, and a tier topic has 12, read by ingest at every depth refresh and by the
    scaler's collector every tick; each request is broker CPU. aiokafka's group
    coordinator takes a list but has no public method for it; if that ever changes, this
    asks partition by partition as before (correct, only the saving is lost)."""
    coordinator = getattr(consumer, "_coordinator", None)
    fetch = getattr(coordinator, "fetch_committed_offsets", None)
    if fetch is None:
        return {tp: await consumer.committed(tp) for tp in tps}
    found = await fetch(list(tps))
    out: dict[TopicPartition, int | None] = {}
    for tp in tps:
        at = found.get(tp)
        out[tp] = None if at is None or at.offset < 0 else at.offset
    return out

"""The harness's producers, and the `Sent` entry it keeps for each event once handed over."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Protocol

from aiokafka.errors import KafkaError

from infra.kafka import make_producer, start_with_retry
from schemas.request import InferenceRequest
from services.chaos.events import Event, digest
from services.chaos.ledger import Sent
from services.client import InferenceClient
from services.client.wire import WireRequest

log = logging.getLogger(__name__)

MAX_REQUEST_BYTES = 16 * 1024 * 1024
"""Room for the storm's 5 MB events."""

TIMED_OUT = "timeout"
"""What `ClientProducer.seen` holds for an `infer` call that got no result by its deadline."""


class Sink(Protocol):
    """Where events go: a plain producer, or inferbus's own client."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def put(self, event: Event, topic: str) -> None:
        """Hand one event over; KafkaError when it was not accepted."""
        ...


class RawProducer:
    """An outside producer in any language would do this: produce, await the ack."""

    def __init__(self, bootstrap: str) -> None:
        self._producer = make_producer(
            bootstrap, client_id="inferbus-chaos", max_request_size=MAX_REQUEST_BYTES
        )

    async def start(self) -> None:
        await start_with_retry(self._producer.start, what="chaos-producer")

    async def stop(self) -> None:
        await self._producer.stop()

    async def put(self, event: Event, topic: str) -> None:
        await self._producer.send_and_wait(topic, event.value, key=event.kafka_key)


class ClientProducer:
    """`InferenceClient.infer` per event: the client waits out an away broker and sends
    again what a restarted broker lost. Valid requests only (it re-encodes them); the
    topic is the client's own choice (its tier's ingest topic)."""

    def __init__(self, bootstrap: str) -> None:
        self._client = InferenceClient(bootstrap, client_id="inferbus-chaos-client")
        self.seen: dict[str, str] = {}
        """What each `infer` call ended with, by request id: the result's status, or
        `timeout`. The client's own view, beside the observer's read of the results topic."""

    async def start(self) -> None:
        await self._client.start()

    async def stop(self) -> None:
        await self._client.stop()

    async def put(self, event: Event, topic: str) -> None:
        request = InferenceRequest.model_validate_json(event.value)
        try:
            result = await self._client.infer(
                WireRequest(request), timeout_s=max(event.deadline_s - time.time(), 0.1)
            )
        except TimeoutError:
            # No result by the deadline: the ledger tells lost from late from what the
            # topics show; for the client the request was handed over.
            self.seen[request.request_id] = TIMED_OUT
            return
        self.seen[request.request_id] = result.status


class Traffic:
    """Produces events through a sink, fire and forget or awaited, and keeps what was sent.

    A send that fails (the broker is down past the producer's timeout) is kept as not
    accepted: the producer knows it failed, so it is never counted as lost.
    """

    def __init__(self, sink: Sink, *, clock: Callable[[], float] = time.time) -> None:
        self._sink = sink
        self._clock = clock
        self._tasks: set[asyncio.Task[Sent]] = set()
        self.sent: list[Sent] = []
        self.failures: dict[str, int] = {}
        """Send errors by type name."""

    @property
    def sink(self) -> Sink:
        return self._sink

    async def start(self) -> None:
        await self._sink.start()

    async def stop(self) -> None:
        await self.flush()
        await self._sink.stop()

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    async def send_now(self, event: Event, topic: str, *, phase: str = "main") -> Sent:
        """Produce one event and wait for its ack (or failure)."""
        sent_s = self._clock()
        accepted = True
        try:
            await self._sink.put(event, topic)
        except KafkaError as exc:
            accepted = False
            name = type(exc).__name__
            self.failures[name] = self.failures.get(name, 0) + 1
        entry = Sent(
            kind=event.kind,
            request_id=event.request_id,
            digest=digest(event.value),
            sent_s=sent_s,
            deadline_s=event.deadline_s,
            accepted=accepted,
            tier=event.tier,
            phase=phase,
        )
        self.sent.append(entry)
        return entry

    def send(self, event: Event, topic: str, *, phase: str = "main") -> None:
        """Produce one event; its ack is awaited in the background (`flush` waits for all)."""
        task = asyncio.create_task(self.send_now(event, topic, phase=phase))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def paced(
        self,
        make: Callable[[], Event],
        topic: str,
        *,
        rate_rps: float,
        duration_s: float,
        phase: Callable[[], str] = lambda: "main",
    ) -> int:
        """Send `make()` events evenly at `rate_rps` for `duration_s`; returns how many."""
        started = time.monotonic()
        count = 0
        total = int(rate_rps * duration_s)
        while count < total:
            due = min(int((time.monotonic() - started) * rate_rps) + 1, total)
            for _ in range(due - count):
                self.send(make(), topic, phase=phase())
            count = due
            await asyncio.sleep(min(0.01, 1 / rate_rps))
        return count

    async def flush(self) -> None:
        """Wait for every background send's ack or failure."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks))

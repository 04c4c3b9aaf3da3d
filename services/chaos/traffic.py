"""The harness's producer: events to the ingest topics, a `Sent` entry for each once acked."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from aiokafka.errors import KafkaError

from infra.kafka import make_producer, start_with_retry
from services.chaos.events import Event, digest
from services.chaos.ledger import Sent

log = logging.getLogger(__name__)

MAX_REQUEST_BYTES = 16 * 1024 * 1024
"""Room for the storm's 5 MB events."""


class Traffic:
    """Produces events, fire and forget or awaited, and keeps what was sent.

    A send that fails (the broker is down past the producer's timeout) is kept as not
    accepted: the producer knows it failed, so it is never counted as lost.
    """

    def __init__(self, bootstrap: str, *, clock: Callable[[], float] = time.time) -> None:
        self._producer = make_producer(
            bootstrap, client_id="inferbus-chaos", max_request_size=MAX_REQUEST_BYTES
        )
        self._clock = clock
        self._tasks: set[asyncio.Task[Sent]] = set()
        self.sent: list[Sent] = []
        self.failures: dict[str, int] = {}
        """Send errors by type name."""

    async def start(self) -> None:
        await start_with_retry(self._producer.start, what="chaos-producer")

    async def stop(self) -> None:
        await self.flush()
        await self._producer.stop()

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    async def send_now(self, event: Event, topic: str, *, phase: str = "main") -> Sent:
        """Produce one event and wait for its ack (or failure)."""
        sent_s = self._clock()
        accepted = True
        try:
            await self._producer.send_and_wait(topic, event.value, key=event.kafka_key)
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

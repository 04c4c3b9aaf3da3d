"""The telemetry feed: consumes `inferbus.telemetry` and keeps the newest heartbeat per worker."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from infra.kafka import stop_consume_loop
from scaler.collector.load import latest
from schemas.telemetry import Heartbeat
from schemas.topics import TELEMETRY

log = logging.getLogger(__name__)

HeartbeatSink = Callable[[Heartbeat], None]
"""Also called with every heartbeat (e.g. the stage-histogram windows)."""


class TelemetryFeed:
    """Reads heartbeats from now on (no group, so every scaler sees all of them)."""

    def __init__(
        self,
        bootstrap: str,
        sinks: Sequence[HeartbeatSink] = (),
        topic: str = TELEMETRY,
        poll_timeout_ms: int = 500,
    ) -> None:
        self._bootstrap = bootstrap
        self._sinks = tuple(sinks)
        self._topic = topic
        self._poll_timeout_ms = poll_timeout_ms
        self.heartbeats: dict[str, Heartbeat] = {}
        """Newest heartbeat per instance id."""
        self.invalid = 0
        self.error: BaseException | None = None
        """Set when the consume loop died."""
        self._consumer: Any = None
        self._task: asyncio.Task[None] | None = None

    def observe(self, heartbeat: Heartbeat) -> None:
        """Fold one heartbeat (also how tests and the embedded stack feed it directly)."""
        self.heartbeats = latest(self.heartbeats, heartbeat)
        for sink in self._sinks:
            sink(heartbeat)

    def prune(self, now: datetime, max_age_s: float) -> None:
        """Forget workers silent for longer than `max_age_s` (they are gone or partitioned)."""
        self.heartbeats = {
            k: hb for k, hb in self.heartbeats.items() if (now - hb.at).total_seconds() <= max_age_s
        }

    async def start(self) -> None:
        """Start consuming (idempotent)."""
        if self._task is not None:
            return
        from infra.kafka import make_consumer

        consumer = make_consumer(
            self._topic,
            bootstrap=self._bootstrap,
            group_id=None,
            auto_offset_reset="latest",
            # Heartbeats come every few seconds: a short wait only costs the broker idle fetches.
            fetch_max_wait_ms=self._poll_timeout_ms,
        )
        await consumer.start()
        self._consumer = consumer
        self._task = asyncio.create_task(self._run(), name="inferbus-telemetry-feed")
        self._task.add_done_callback(self._on_done)

    def _on_done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            self.error = task.exception()
            log.error("event=telemetry_feed_stopped topic=%s error=%r", self._topic, self.error)

    async def _run(self) -> None:
        while True:
            batches = await self._consumer.getmany(timeout_ms=self._poll_timeout_ms)
            for messages in batches.values():
                for message in messages:
                    self._apply(message.value)

    def _apply(self, value: bytes | None) -> None:
        if value is None:
            return
        try:
            heartbeat = Heartbeat.model_validate_json(value)
        except ValidationError as exc:
            self.invalid += 1
            log.warning("event=heartbeat_invalid error=%s", exc.errors()[:1])
            return
        self.observe(heartbeat)

    async def close(self) -> None:
        """Stop consuming (idempotent)."""
        task, self._task = self._task, None
        consumer, self._consumer = self._consumer, None
        await stop_consume_loop(task, consumer)

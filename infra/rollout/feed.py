"""Reads `inferbus.rollouts` from its start into a `RolloutBook` (the scaler's reader;
ingest and the workers fold it through their control consumer instead)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from infra.kafka import make_consumer, start_with_retry, stop_consume_loop
from infra.rollout.state import RolloutBook
from schemas.topics import ROLLOUTS

log = logging.getLogger(__name__)


class RolloutFeed:
    """Consumes the whole topic (it is compacted: one record per model) without a group."""

    def __init__(self, bootstrap: str, book: RolloutBook, *, topic: str = ROLLOUTS) -> None:
        self._bootstrap = bootstrap
        self.book = book
        self._topic = topic
        self._consumer: Any = None
        self._task: asyncio.Task[None] | None = None
        self.error: BaseException | None = None
        """Set when the consume loop died (logged)."""

    async def start(self) -> None:
        """Start consuming from the earliest record (idempotent)."""
        if self._task is not None:
            return
        consumer = make_consumer(
            self._topic,
            bootstrap=self._bootstrap,
            group_id=None,
            client_id="inferbus-rollouts",
            auto_offset_reset="earliest",
        )
        await start_with_retry(consumer.start, what="rollouts-feed")
        self._consumer = consumer
        self._task = asyncio.create_task(self._run(), name="inferbus-rollouts-feed")
        self._task.add_done_callback(self._on_done)

    def _on_done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            self.error = task.exception()
            log.error("event=rollouts_feed_stopped topic=%s error=%r", self._topic, self.error)

    async def _run(self) -> None:
        while True:
            batches = await self._consumer.getmany(timeout_ms=500)
            for records in batches.values():
                for record in records:
                    self.book.observe(record.key, record.value)

    async def close(self) -> None:
        """Stop consuming (idempotent)."""
        task, self._task = self._task, None
        consumer, self._consumer = self._consumer, None
        await stop_consume_loop(task, consumer)

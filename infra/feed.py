"""A background reader of one topic without a consumer group: each record goes to a fold."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any, Literal

from aiokafka import TopicPartition

from infra.gaps import GapGuard, getmany_in_order
from infra.kafka import make_consumer, start_with_retry, stop_consume_loop
from infra.log_end import LogEndProbe, rewind_restarted_logs

log = logging.getLogger(__name__)


def feed_wait_ms(tick_s: float) -> int:
    """Fetch wait of a feed read by a loop that acts every `tick_s` (the scaler), ms: 0.4
    of the tick, within 500 ms and 2 s.

    Tansu answers a waiting fetch at half its wait once records are there, so what the loop
    reads is at most a fifth of a tick late. Every waiting fetch costs Tansu ~2.5 ms of CPU
    whatever its wait (200-1000 ms; docs/benchmarks.md, stop 26): at 500 ms, woken every
    250 ms by heartbeats, the scaler's three feeds cost an idle stack ~0.02 cores.
    """
    return round(min(max(tick_s * 400, 500), 2000))


FEED_WAIT_MS = feed_wait_ms(5.0)
"""The wait for the scaler's default tick (5 s): 2 s."""

LOG_END_CHECK_S = 5.0
"""How often a feed asks whether its log now ends before its position (a broker that came
back without its logs): one ListOffsets request a feed."""

RecordFold = Callable[[bytes | None, bytes | None], None]
"""Called with each record's key and value, in order per partition."""


READ_TO_END_PATIENCE_S = 5
"""How long `read_to_end` waits for the next record short of the end before it says so."""


async def read_to_end(bootstrap: str, topic: str, fold: RecordFold, *, client_id: str) -> bool:
    """Fold every record of `topic` from its start to its end as of now, once (a command's
    look at a compacted topic); False when the topic does not exist. TimeoutError when no
    record comes for `READ_TO_END_PATIENCE_S` short of the end: a command must not decide
    on a part of the topic."""
    consumer = make_consumer(bootstrap=bootstrap, group_id=None, client_id=client_id)
    try:
        await start_with_retry(consumer.start, what=client_id, attempts=3)
        if topic not in await consumer.topics():  # also fetches the topic's metadata
            return False
        partitions = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or ()]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        ends = await consumer.end_offsets(partitions)
        idle = 0
        while True:
            positions = {tp: await consumer.position(tp) for tp in partitions}
            if all(positions[tp] >= end for tp, end in ends.items()):
                return True
            batches = await consumer.getmany(*partitions, timeout_ms=1000)
            idle = 0 if batches else idle + 1
            if idle >= READ_TO_END_PATIENCE_S:
                short = {tp.partition: (positions[tp], end) for tp, end in ends.items()}
                raise TimeoutError(
                    f"could not read {topic} to its end: nothing came for "
                    f"{READ_TO_END_PATIENCE_S} s at (position, end) by partition {short}"
                )
            for records in batches.values():
                for record in records:
                    fold(record.key, record.value)
    finally:
        await consumer.stop()


class TopicFeed:
    """Folds every record of `topic` from `start_at` on, until closed.

    No group: every process that runs a feed sees every record. The fetch wait is long
    (`FEED_WAIT_MS`) because feeds read topics that are written rarely (decisions,
    heartbeats) for a reader that acts every few seconds.
    """

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        fold: RecordFold,
        *,
        name: str,
        start_at: Literal["earliest", "latest"],
        client_id: str = "inferbus",
        poll_timeout_ms: int = FEED_WAIT_MS,
        start_attempts: int = 1,
    ) -> None:
        self._bootstrap = bootstrap
        self._topic = topic
        self._fold = fold
        self._name = name
        self._start_at = start_at
        self._client_id = client_id
        self._poll_timeout_ms = poll_timeout_ms
        self._start_attempts = start_attempts
        self._consumer: Any = None
        self._log_ends = LogEndProbe(bootstrap, client_id=f"{client_id}-{name}")
        """Tells a position inside a log's last batch from one past the log."""
        self._task: asyncio.Task[None] | None = None
        self.error: BaseException | None = None
        """Set when the consume loop died (logged)."""

    async def start(self) -> None:
        """Start consuming (idempotent); retries a refused connection `start_attempts` times."""
        if self._task is not None:
            return
        consumer = make_consumer(
            self._topic,
            bootstrap=self._bootstrap,
            group_id=None,
            client_id=self._client_id,
            auto_offset_reset=self._start_at,
            fetch_max_wait_ms=self._poll_timeout_ms,
        )
        try:
            await start_with_retry(
                consumer.start, what=f"{self._name}-feed", attempts=self._start_attempts
            )
        except BaseException:
            await consumer.stop()  # what a failed start opened is closed, then it raises
            raise
        self._consumer = consumer
        self._task = asyncio.create_task(self._run(), name=f"inferbus-{self._name}-feed")
        self._task.add_done_callback(self._on_done)

    def _on_done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            self.error = task.exception()
            log.error(
                "event=%s_feed_stopped topic=%s error=%r", self._name, self._topic, self.error
            )

    async def _run(self) -> None:
        gaps = GapGuard()
        checked_at = time.monotonic()
        while True:
            batches = await getmany_in_order(self._consumer, gaps, timeout_ms=self._poll_timeout_ms)
            for records in batches.values():
                for record in records:
                    self._fold(record.key, record.value)
            if time.monotonic() - checked_at >= LOG_END_CHECK_S:
                checked_at = time.monotonic()
                await rewind_restarted_logs(
                    self._consumer, self._log_ends, what=f"{self._name}_feed"
                )

    async def close(self) -> None:
        """Stop consuming (idempotent)."""
        task, self._task = self._task, None
        consumer, self._consumer = self._consumer, None
        await stop_consume_loop(task, consumer)
        await self._log_ends.close()

"""Broker reads for one worker group: end, start and committed offsets, and head records."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scaler.collector.lag import EndBranch, PartitionOffsets, corrected_end

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OffsetsAnswer:
    """One read of a group's topic: the partitions in metadata and each one's offsets."""

    partitions: tuple[int, ...]
    offsets: tuple[PartitionOffsets, ...]
    end_branches: Mapping[int, EndBranch]


class GroupOffsetReader:
    """A consumer with the group's id that never subscribes or joins (Tansu cannot answer the
    admin client's list_consumer_group_offsets); it reads offsets and assigns partitions only
    for the moment it reads a few records."""

    def __init__(
        self,
        bootstrap: str,
        group: str,
        topic: str,
        timeout_s: float = 5.0,
        verify_end_offsets: bool = True,
    ) -> None:
        self.group = group
        self.topic = topic
        self._bootstrap = bootstrap
        self._timeout_s = timeout_s
        self._verify = verify_end_offsets
        self._consumer: Any = None
        self._verified: dict[int, tuple[int, int, EndBranch]] = {}
        """Per partition: (reported end, true end, branch) of the last verification."""

    async def start(self) -> None:
        """Connect (idempotent)."""
        if self._consumer is not None:
            return
        from infra.kafka import make_consumer

        consumer = make_consumer(
            bootstrap=self._bootstrap,
            group_id=self.group,
            client_id="inferbus-scaler",
            fetch_max_wait_ms=500,  # aiokafka's default: this reader polls rarely.
            auto_offset_reset="none",
            max_partition_fetch_bytes=256 * 1024,
            request_timeout_ms=int(self._timeout_s * 1000),
        )
        try:
            await consumer.start()
        except BaseException:  # refused, timed out or cancelled: nothing left open
            await consumer.stop()
            raise
        self._consumer = consumer

    async def close(self) -> None:
        """Disconnect (idempotent)."""
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            await consumer.stop()

    async def read(self) -> OffsetsAnswer:
        """Partitions, end (verified), beginning and committed offsets, within the timeout."""
        async with asyncio.timeout(self._timeout_s):
            return await self._read()

    async def _read(self) -> OffsetsAnswer:
        from aiokafka import TopicPartition

        consumer = self._require()
        await consumer.topics()  # Refresh metadata: partitions may have been added.
        partitions = tuple(sorted(consumer.partitions_for_topic(self.topic) or ()))
        tps = [TopicPartition(self.topic, p) for p in partitions]
        if not tps:
            return OffsetsAnswer((), (), {})
        ends_raw, starts_raw, committed = await asyncio.gather(
            consumer.end_offsets(tps),
            consumer.beginning_offsets(tps),
            _committed_or_none(consumer, tps, self.group),
        )
        ends: dict[int, int] = {tp.partition: int(v) for tp, v in ends_raw.items()}
        starts: dict[int, int] = {tp.partition: int(v) for tp, v in starts_raw.items()}
        branches = await self._true_ends(ends, starts)
        answers = []
        for tp in tps:
            p = tp.partition
            answers.append(
                PartitionOffsets(
                    partition=p,
                    end=ends.get(p),
                    beginning=starts.get(p),
                    committed=None if committed is None else committed.get(tp),
                    answered=committed is not None,
                )
            )
        return OffsetsAnswer(partitions, tuple(answers), branches)

    async def _true_ends(
        self, ends: dict[int, int], starts: Mapping[int, int]
    ) -> dict[int, EndBranch]:
        """Correct `ends` in place for brokers that report a batch's base offset + 1."""
        branches: dict[int, EndBranch] = {}
        if not self._verify:
            return dict.fromkeys(ends, "reported")
        to_read: dict[int, int] = {}
        for p, reported in ends.items():
            cached = self._verified.get(p)
            if cached is not None and cached[0] == reported:
                # No new batch since the last check: the true end cannot have moved.
                ends[p], branches[p] = cached[1], cached[2]
            elif reported > starts.get(p, 0):
                to_read[p] = reported - 1
            else:
                branches[p] = "reported"
        highest = await self.last_offsets(to_read)
        for p, at in to_read.items():
            reported = at + 1
            true_end, branch = corrected_end(reported, highest.get(p))
            if branch == "batch_base_end":
                log.debug(
                    "end offset corrected group=%s partition=%d reported=%d true=%d",
                    self.group,
                    p,
                    reported,
                    true_end,
                )
            self._verified[p] = (reported, true_end, branch)
            ends[p], branches[p] = true_end, branch
        return branches

    async def last_offsets(self, start_at: Mapping[int, int]) -> dict[int, int]:
        """The highest offset in the first fetch from each partition's `start_at` offset.

        A fetch returns whole batches, so this reaches the end of the batch holding `start_at`.
        """
        records = await self._fetch(start_at)
        return {p: max(r[0] for r in rs) for p, rs in records.items() if rs}

    async def head_timestamps(self, positions: Mapping[int, int]) -> dict[int, int | None]:
        """Timestamp (ms) of the record at each partition's position; None when none was read."""
        records = await self._fetch(positions)
        found: dict[int, int | None] = {}
        for p, at in positions.items():
            heads = [ts for offset, ts in records.get(p, []) if offset >= at]
            found[p] = heads[0] if heads else None
        return found

    async def _fetch(self, start_at: Mapping[int, int]) -> dict[int, list[tuple[int, int]]]:
        """(offset, timestamp ms) of the records of one fetch per partition, in offset order."""
        from aiokafka import TopicPartition

        from infra.log_end import fetch_once

        starts = {TopicPartition(self.topic, p): offset for p, offset in start_at.items()}
        fetched = await fetch_once(self._require(), starts, self._timeout_s / 2)
        return {
            tp.partition: [(m.offset, m.timestamp) for m in records]
            for tp, records in fetched.items()
        }

    def _require(self) -> Any:
        if self._consumer is None:
            raise RuntimeError(f"offset reader for {self.group} is not started")
        return self._consumer


async def _committed_or_none(
    consumer: Any, tps: list[Any], group: str
) -> dict[Any, int | None] | None:
    """The group's committed offsets of `tps` in one request; None (said) if unreadable."""
    from aiokafka.errors import KafkaError

    from infra.kafka import committed_offsets

    try:
        return await committed_offsets(consumer, tps)
    except KafkaError as exc:
        log.warning("committed offsets unreadable group=%s error=%r", group, exc)
        return None

"""The reply topic read from where the run began, also across a broker that lost its logs.

A broker that comes back without its logs (the embedded one restarted by `inferbus up`)
numbers the reply topic's records from 0 again, and a reader still positioned past the
new log's end is given nothing until the new log passes its old position: the run counted
every answer written meanwhile as lost. So every `check_every_s` the reader asks each
partition's end; a position past it is only a suspect (Tansu reports the last batch's
first offset + 1, short of a position inside that batch), judged by reading that batch
(`infra.log_end.LogEndProbe`, as the services' consumers do), and a partition whose log
now ends before the position is read again from its start. Nothing is counted twice: the
ledger keeps the first result per request id, and the new log holds only what was written
after the restart.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from aiokafka import TopicPartition
from aiokafka.errors import KafkaError

from infra.gaps import GapGuard, getmany_in_order
from infra.kafka import read_from_start
from infra.log_end import EndVerdict
from infra.tasks import within

log = logging.getLogger(__name__)

LOG_END_CHECK_S = 1.0
"""How often the reader checks that the reply logs did not restart under it. Records
written to a new log before the check finds it are read then; only a new log that grows
past the old position within this time would be read from there on (the services check
every 5 s: `infra.feed.LOG_END_CHECK_S`)."""


class EndJudge(Protocol):
    """`infra.log_end.LogEndProbe`, or a test's stand-in."""

    async def judge(
        self, suspects: Mapping[TopicPartition, int], positions: Mapping[TopicPartition, int]
    ) -> EndVerdict: ...


class ResultReader:
    """Hands each result record's value to `on_value`; reads a restarted log from its start.

    `consumer` is assigned the reply partitions and positioned already; `probe` judges
    positions past a log's reported end (`LogEndProbe`, or a stand-in)."""

    def __init__(
        self,
        consumer: Any,
        probe: EndJudge,
        on_value: Callable[[bytes], None],
        *,
        check_every_s: float = LOG_END_CHECK_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._consumer = consumer
        self._probe = probe
        self._on_value = on_value
        self._check_every_s = check_every_s
        self._clock = clock
        self.restarts = 0
        """Times the reply logs were found restarted and read again from their start."""
        self.reread: list[TopicPartition] = []
        """Partitions read again from their start, over the whole run."""

    async def run(self) -> None:
        """Read until cancelled."""
        gaps = GapGuard()
        checked_at = self._clock()
        while True:
            batches = await getmany_in_order(self._consumer, gaps, timeout_ms=100)
            for records in batches.values():
                for record in records:
                    if record.value is not None:
                        self._on_value(record.value)
            if self._clock() - checked_at >= self._check_every_s:
                await self.rewind_restarted()
                checked_at = self._clock()

    async def rewind_restarted(self) -> list[TopicPartition]:
        """Read from the start each assigned log that now ends before our position; the
        partitions read again (none when the broker cannot tell now: asked next time)."""
        consumer = self._consumer
        try:
            ends = await consumer.end_offsets(sorted(consumer.assignment()))
            positions = {tp: await within(consumer.position(tp), 1.0) for tp in ends}
        except (KafkaError, TimeoutError) as exc:  # the broker is away: asked again later
            log.debug("event=load_results_end_check_failed error=%r", exc)
            return []
        suspects = {tp: end for tp, end in ends.items() if positions[tp] > end}
        if not suspects:
            return []
        past = sorted((await self._probe.judge(suspects, positions)).past)
        if not past:
            return []
        read_from_start(consumer, *past)
        self.restarts += 1
        self.reread.extend(past)
        log.info(
            "event=load_results_log_restarted topic=%s partitions=%d "
            "positions=%s ends=%s (reading them from the start)",
            past[0].topic,
            len(past),
            ",".join(str(positions[tp]) for tp in past),
            ",".join(str(suspects[tp]) for tp in past),
        )
        return past

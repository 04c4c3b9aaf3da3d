"""The drain estimate read by read: `QueueDepths._refresh_group` over a fake lag consumer and
a fake clock, one 0.5 s read at a time (commits that come a batch at a time, absences)."""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace

import pytest
from aiokafka import TopicPartition

from services.ingest import catalog as catalog_module
from services.ingest.catalog import QueueDepths

T = "inferbus.req.demo-encoder.interactive"
GROUP = "inferbus.workers.demo-encoder.interactive"
READ_S = 0.5

Read = tuple[int, int]
"""(requests that arrived, requests the workers committed) since the read before."""


class FakeLag:
    """The lag consumer `_refresh_group` reads: one partition, its end and committed offset."""

    def __init__(self) -> None:
        self.end = 0
        self.committed = 0

    def partitions_for_topic(self, topic: str) -> set[int]:
        return {0}

    async def topics(self) -> set[str]:
        return {T}

    async def end_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return dict.fromkeys(tps, self.end)


class Drive:
    """Reads a queue's committed offsets tick by tick; `capacity` after each read."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.now = 100.0
        self.lag = FakeLag()
        self.queue = QueueDepths("unused:9092", refresh_ms=int(READ_S * 1000))
        self.queue.watch_models(["demo-encoder"])
        self.queue._consumers[GROUP] = self.lag  # type: ignore[assignment]
        self.capacity: list[float | None] = []

        async def committed_offsets(
            consumer: FakeLag, tps: list[TopicPartition]
        ) -> dict[TopicPartition, int]:
            return dict.fromkeys(tps, consumer.committed)

        monkeypatch.setattr(catalog_module, "committed_offsets", committed_offsets)
        monkeypatch.setattr(catalog_module, "time", SimpleNamespace(monotonic=lambda: self.now))

    async def reads(self, reads: Sequence[Read]) -> None:
        for arrived, committed in reads:
            self.now += READ_S
            self.lag.end += arrived
            self.lag.committed += committed
            await self.queue._refresh_group(GROUP, [T])
            self.capacity.append(self.queue._rates.get(T))

    async def restart(self) -> None:
        """The broker came back empty: ingest forgets the old logs, offsets start over."""
        self.queue.forget(frozenset({T}))
        self.lag.end = self.lag.committed = 0


def keeping_up(reads: int, per_read: int = 2) -> list[Read]:
    return [(per_read, per_read)] * reads


def batches(reads: int, *, every: int | Sequence[int], batch: int, arrived: int) -> list[Read]:
    """`batch` committed at once every `every` reads (a sequence: in turn), `arrived` a read."""
    gaps = [every] if isinstance(every, int) else list(every)
    out: list[Read] = []
    turn = 0
    while len(out) < reads:
        gap = gaps[turn % len(gaps)]
        out += [(arrived, 0)] * (gap - 1) + [(arrived, batch)]
        turn += 1
    return out[:reads]


# The workers' true capacity in each case: 32 a batch, one batch every 2.0 s (4 reads) is
# 16/s; every 1.5 and 1.0 s in turn (a 1.25 s batch against 0.5 s reads) is 25.6/s.
LUMPY = [
    pytest.param(
        # The tester's run: a trickle of adjacent commits at the backlog's start (the first
        # reading, ~4/s), then 512-token batches that commit every 4th read.
        [*keeping_up(4), (60, 2), (60, 2), *batches(40, every=4, batch=32, arrived=60)],
        16.0,
        id="every-4th-read-after-a-trickle",
    ),
    pytest.param(
        [*keeping_up(4), *batches(40, every=4, batch=32, arrived=60)],
        16.0,
        id="every-4th-read-never-adjacent",
    ),
    pytest.param(
        [*keeping_up(4), (60, 2), (60, 2), *batches(40, every=(3, 2), batch=32, arrived=60)],
        25.6,
        id="every-3rd-then-2nd-read",
    ),
    pytest.param(
        [*keeping_up(4), *batches(40, every=1, batch=20, arrived=60)],
        40.0,
        id="every-read",
    ),
]


@pytest.mark.parametrize(("reads", "capacity"), LUMPY)
async def test_commits_that_come_a_batch_at_a_time_read_as_the_workers_rate(
    monkeypatch: pytest.MonkeyPatch, reads: list[Read], capacity: float
) -> None:
    drive = Drive(monkeypatch)
    await drive.reads(reads)
    last = drive.capacity[-8:]  # two or more batches: the alternating case swings by turns
    assert all(c is not None for c in last), drive.capacity
    mean = sum(c or 0.0 for c in last) / len(last)
    assert mean == pytest.approx(capacity, rel=0.1), drive.capacity


ABSENT = [
    pytest.param(
        batches(12, every=1, batch=20, arrived=60),
        [(60, 0)] * 6,  # 3 s: a worker killed and replaced, a group rejoining
        batches(8, every=1, batch=20, arrived=60),
        40.0,
        id="steady-commits-then-3s-away",
    ),
    pytest.param(
        batches(24, every=3, batch=32, arrived=60),
        [(60, 0)] * 8,  # 4 s away after batches 1.5 s apart
        batches(12, every=3, batch=32, arrived=60),
        21.3,
        id="batches-then-4s-away",
    ),
]


@pytest.mark.parametrize(("before", "away", "after", "capacity"), ABSENT)
async def test_an_absence_is_not_read_as_low_capacity(
    monkeypatch: pytest.MonkeyPatch,
    before: list[Read],
    away: list[Read],
    after: list[Read],
    capacity: float,
) -> None:
    """The span that ends at the workers' return holds their absence: priced at it, the
    backlog they drain at full speed a second later would be refused (chaos worker-kill,
    broker-restart-client)."""
    drive = Drive(monkeypatch)
    await drive.reads([*keeping_up(4), *before])
    assert drive.capacity[-1] == pytest.approx(capacity, rel=0.1), drive.capacity
    await drive.reads([*away, *after])
    since = drive.capacity[-len(away) - len(after) :]
    assert min(c or 0.0 for c in since) >= capacity * 0.9, since


async def test_the_first_commits_after_a_restart_are_no_reading(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A broker that came back empty: ingest forgot the old offsets; the workers rejoin
    (2.3 s without a commit), then drain at 156/s. The read with their first commits
    straddles the return (docs/reliability.md, stop 26); the one after it is a reading."""
    drive = Drive(monkeypatch)
    await drive.reads([*keeping_up(4), *batches(12, every=1, batch=20, arrived=60)])
    await drive.restart()
    await drive.reads([(448, 0), (26, 0), *[(29, 0)] * 4, (0, 78), (0, 78)])
    assert drive.capacity[-8:] == [None] * 7 + [pytest.approx(156.0)]

"""The scaler's sweeps of retired groups' queues: one task a group, a few at a time.

A retiring group with no worker left holds requests no worker will read; a sweep answers
each with an error result and commits past it (`services.runtime.orphans`). This keeps the
tasks: it starts a group's sweep unless one runs (or one failed moments ago), stops it when
a worker or the model comes back, says how each went, and tells whether the last one found
nothing (the one way to know a never-collected group's queue is empty).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from infra.tasks import end_and_say
from schemas.result import Status
from services.runtime.orphans import SweepCounts, answer_orphans, unanswered
from services.runtime.publisher import Publisher

log = logging.getLogger(__name__)

SWEEPS_AT_ONCE = 4
"""Groups whose queues are read at once (each a consumer of its own): a scaler that starts
beside the topics of a hundred removed models does not open a hundred."""
RETRY_AFTER_S = 30.0
"""How long after a failed sweep (said when it failed) the next one may start."""
PROGRESS_EVERY_S = 5.0
"""A long sweep's progress line, at most this often."""


class Sweep(Protocol):
    """`answer_orphans` as the sweeps call it."""

    def __call__(
        self,
        bootstrap: str,
        publisher: Publisher,
        *,
        group: str,
        topic: str,
        status: Status,
        why: str,
        progress: Callable[[SweepCounts], None] | None = None,
    ) -> Awaitable[SweepCounts]: ...


@dataclass
class _Run:
    task: asyncio.Task[SweepCounts]
    ended_at: float | None = None


class OrphanSweeps:
    """Sweeps per group; `bind` a publisher before the first `ensure`."""

    def __init__(
        self,
        bootstrap: str,
        *,
        sweep: Sweep = answer_orphans,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.bootstrap = bootstrap
        self._sweep = sweep
        self._clock = clock
        self._slots = asyncio.Semaphore(SWEEPS_AT_ONCE)
        self._runs: dict[str, _Run] = {}
        self._publisher: Publisher | None = None

    def bind(self, publisher: Publisher) -> None:
        """The publisher every sweep answers through."""
        self._publisher = publisher

    def running(self, group: str) -> bool:
        run = self._runs.get(group)
        return run is not None and not run.task.done()

    def found_nothing(self, group: str) -> bool:
        """The group's last sweep ended well and had nothing to answer."""
        run = self._runs.get(group)
        if run is None or not run.task.done() or run.task.cancelled():
            return False
        return run.task.exception() is None and run.task.result().total == 0

    def ensure(
        self, group: str, *, topic: str, status: Status, why: str, queued: int | None
    ) -> None:
        """Start sweeping `group`'s `topic` unless a sweep runs, or one failed less than
        `RETRY_AFTER_S` ago; `queued`: what the group's lag says it holds (None: unknown)."""
        if self._publisher is None:
            raise RuntimeError("OrphanSweeps.bind() a publisher first")
        run = self._runs.get(group)
        if run is not None and not run.task.done():
            return
        if run is not None and _failed(run.task) and not self._may_retry(run):
            return
        log.info(
            "event=orphans_answering group=%s queued=%s status=%s why=%r "
            "(no worker is left for them, and none can start)",
            group,
            "unknown" if queued is None else queued,
            status,
            why,
        )
        task = asyncio.create_task(
            self._run(self._publisher, group, topic, status, why), name=f"orphans-{group}"
        )
        run = self._runs[group] = _Run(task)
        task.add_done_callback(lambda ended: self._ended(group, run, ended))

    def _may_retry(self, run: _Run) -> bool:
        """A failed run's pause is over (its end not yet noted: it has just ended)."""
        return run.ended_at is not None and self._clock() - run.ended_at >= RETRY_AFTER_S

    async def stop(self, group: str, why: str) -> None:
        """Stop and forget `group`'s sweep (a worker is live again, the model is back, or
        the group is dropped)."""
        run = self._runs.pop(group, None)
        if run is None or run.task.done():  # a failure was said when it failed
            return
        log.info("event=orphans_stopped group=%s why=%r", group, why)
        await end_and_say(run.task, log)

    async def close(self) -> None:
        """Stop every sweep; what is left is found by the next scaler to start."""
        for group in list(self._runs):
            await self.stop(group, "the scaler stops")

    async def unanswered(self, group: str, topic: str) -> int:
        """`unanswered` for one group, a few at a time."""
        async with self._slots:
            return await unanswered(self.bootstrap, group=group, topic=topic)

    async def _run(
        self, publisher: Publisher, group: str, topic: str, status: Status, why: str
    ) -> SweepCounts:
        said_at = self._clock()

        def progress(done: SweepCounts) -> None:
            nonlocal said_at
            if self._clock() - said_at >= PROGRESS_EVERY_S:
                said_at = self._clock()
                log.info(
                    "event=orphans_progress group=%s answered=%d dead_lettered=%d",
                    group,
                    done.answered,
                    done.dead_lettered,
                )

        async with self._slots:
            done = await self._sweep(
                self.bootstrap,
                publisher,
                group=group,
                topic=topic,
                status=status,
                why=why,
                progress=progress,
            )
        log.log(
            logging.WARNING if done.total else logging.INFO,
            "event=orphans_answered group=%s answered=%d dead_lettered=%d status=%s",
            group,
            done.answered,
            done.dead_lettered,
            status,
        )
        return done

    def _ended(self, group: str, run: _Run, task: asyncio.Task[SweepCounts]) -> None:
        run.ended_at = self._clock()
        if _failed(task):
            log.error(
                "event=orphans_failed group=%s error=%r (tried again in %.0f s)",
                group,
                task.exception(),
                RETRY_AFTER_S,
            )


def _failed(task: asyncio.Task[SweepCounts]) -> bool:
    return task.done() and not task.cancelled() and task.exception() is not None

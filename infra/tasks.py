"""asyncio waits with a time limit, and endings of background tasks, that never lose a
cancellation.

Python 3.11's `asyncio.wait_for` returns what it waited on when that finished in the
same loop turn as its caller was cancelled: the cancel is dropped. A loop around it runs
on after its owner's stop cancelled it (a worker's poll loop did, under load, and the
worker's stop waited for it for ever). `asyncio.timeout` keeps the cancel, and so do
these; the project's code waits with them, never with `asyncio.wait_for`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any, TypeVar

T = TypeVar("T")


async def wait_event(event: asyncio.Event, timeout_s: float | None) -> bool:
    """Wait until `event` is set, at most `timeout_s` (None: no limit); True if it is."""
    if event.is_set():
        return True
    try:
        async with asyncio.timeout(timeout_s):
            await event.wait()
    except TimeoutError:
        return False
    return True


async def within(work: Awaitable[T], timeout_s: float | None) -> T:
    """`await work`, cancelled with TimeoutError after `timeout_s` (None: no limit)."""
    async with asyncio.timeout(timeout_s):
        return await work


def own_cancels() -> int:
    """Cancel requests pending on the calling task: taken before an await and compared
    after it, a rise is the caller's own cancellation arriving meanwhile. (A bare
    `cancelling() > 0` is also true in cleanup that runs because the task was cancelled
    earlier: there it took an awaited task's cancellation for its own, and the cleanup
    stopped half way.)"""
    task = asyncio.current_task()
    return 0 if task is None else task.cancelling()


async def wait_ended(task: asyncio.Future[Any]) -> None:
    """Wait until `task` has ended; its cancellation is not raised, its error is (as
    awaiting it would), and so is the caller's own cancellation arriving meanwhile (a
    bare `contextlib.suppress(CancelledError)` would take that for the task's)."""
    before = own_cancels()
    try:
        await task
    except asyncio.CancelledError:
        if own_cancels() > before:
            raise


async def cancel_and_wait(task: asyncio.Task[Any] | None) -> None:
    """Cancel `task` and `wait_ended` for it (None: nothing to do)."""
    if task is None:
        return
    task.cancel()
    await wait_ended(task)


async def end_and_say(task: asyncio.Task[Any] | None, log: logging.Logger) -> None:
    """`cancel_and_wait`, an error the task had ended with logged instead of raised: a stop
    goes on to close what its owner holds."""
    try:
        await cancel_and_wait(task)
    except Exception as exc:
        assert task is not None
        log.error("event=task_failed task=%s error=%r", task.get_name(), exc, exc_info=exc)


def say_failure(task: asyncio.Task[Any], log: logging.Logger) -> None:
    """Have `task`, a background loop, say the error it ends with when it does (not at its
    owner's stop, which may be hours later)."""

    def said(ended: asyncio.Task[Any]) -> None:
        if not ended.cancelled() and (exc := ended.exception()) is not None:
            log.error("event=task_failed task=%s error=%r", ended.get_name(), exc, exc_info=exc)

    task.add_done_callback(said)

"""Ending background asyncio tasks."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any


async def cancel_and_wait(task: asyncio.Task[Any] | None) -> None:
    """Cancel `task` and wait until it has ended (None: nothing to do).

    A task that already failed raises its error here, as awaiting it would.
    """
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def end_and_say(task: asyncio.Task[Any] | None, log: logging.Logger) -> None:
    """`cancel_and_wait`, an error the task had ended with logged instead of raised: a stop
    goes on to close what its owner holds."""
    try:
        await cancel_and_wait(task)
    except Exception as exc:
        assert task is not None
        log.error("event=task_failed task=%s error=%r", task.get_name(), exc, exc_info=exc)

"""Ctrl-C during a load run as a request to stop sending and report, not an exit."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager

log = logging.getLogger(__name__)


@contextmanager
def first_sigint_calls(callback: Callable[[], None]) -> Iterator[bool]:
    """Within the block the first Ctrl-C calls `callback` instead of raising; a second one
    goes to the handler that was there before (under `asyncio.run`: cancel the run, so the
    command exits 130 at once). Yields whether the handler is in place: not off the main
    thread, nor on a loop without signal handlers."""
    loop = asyncio.get_running_loop()
    previous = signal.getsignal(signal.SIGINT)
    installed = False

    def restore() -> None:
        nonlocal installed
        if installed:
            installed = False
            loop.remove_signal_handler(signal.SIGINT)
            if previous is not None:
                signal.signal(signal.SIGINT, previous)

    def first() -> None:
        restore()
        callback()

    try:
        loop.add_signal_handler(signal.SIGINT, first)
        installed = True
    except (ValueError, RuntimeError, NotImplementedError) as exc:
        # Not the main thread (or a loop without signal handlers): Ctrl-C cannot reach
        # this run, and a run driven from elsewhere stops by cancellation instead.
        log.debug("event=load_sigint_not_handled reason=%r", exc)
    try:
        yield installed
    finally:
        restore()

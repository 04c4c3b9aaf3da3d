"""Say where a loop is waiting when one of its rounds has lasted too long.

A consumer's poll should come round every few hundred milliseconds. When it does not (a
broker request awaited past its answer, a lock never released), the service goes quiet
with nothing in its log; this names the awaits the round is parked in, once per stall.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


def await_chain(task: asyncio.Task[Any]) -> list[str]:
    """`file:line function` of each coroutine the task is suspended in, outermost first."""
    where: list[str] = []
    awaited: Any = task.get_coro()
    while awaited is not None:
        frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "gi_frame", None)
        if frame is not None:
            where.append(f"{frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_name}")
        awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "gi_yieldfrom", None)
    return where


class StallWatch:
    """Logs `event=stalled` with the await chain when a round begun with `begin` has not
    ended within `after_s`; checked every `after_s / 4` by `run`."""

    def __init__(
        self, what: str, *, after_s: float = 10.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.what = what
        self.after_s = after_s
        self._clock = clock
        self._since: float | None = None
        self._task: asyncio.Task[Any] | None = None
        self._reported = False
        self.stalls = 0

    def begin(self) -> None:
        self._since = self._clock()
        self._task = asyncio.current_task()
        self._reported = False

    def end(self) -> None:
        self._since = None

    def check(self) -> bool:
        """Report the round in progress if it has lasted over `after_s` (once a round)."""
        if self._since is None or self._reported or self._task is None:
            return False
        waited = self._clock() - self._since
        if waited < self.after_s:
            return False
        self._reported = True
        self.stalls += 1
        log.warning(
            "event=stalled what=%s waited_s=%.1f at=%s",
            self.what,
            waited,
            " <- ".join(reversed(await_chain(self._task))) or "unknown",
        )
        return True

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.after_s / 4)
            self.check()

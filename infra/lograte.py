"""Bounded log volume: a line that repeats is written a few times per window, then counted.

An error path hit on every record (a broker away, a poison event retried) must not write
thousands of lines a second. Lines are keyed by logger and message template, so distinct
events are never hidden behind one another; the next line written for a key says how many
of its kind were held back.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class _Window:
    started: float
    written: int = 0
    held_back: int = 0


class RateLimitFilter(logging.Filter):
    """Lets `burst` lines per (logger, template) through every `window_s`; counts the rest."""

    def __init__(
        self,
        burst: int = 10,
        window_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        max_keys: int = 10_000,
    ) -> None:
        super().__init__()
        self.burst = burst
        self.window_s = window_s
        self._clock = clock
        self._max_keys = max_keys
        self._windows: dict[tuple[str, str], _Window] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, str(record.msg))
        now = self._clock()
        window = self._windows.get(key)
        if window is None or now - window.started >= self.window_s:
            held = window.held_back if window is not None else 0
            if len(self._windows) >= self._max_keys:
                self._windows.clear()  # bounded memory; worst case a few extra lines
            window = self._windows[key] = _Window(started=now)
            if held:
                record.msg = f"{record.msg} [{held} more like this held back]"
        if window.written < self.burst:
            window.written += 1
            return True
        window.held_back += 1
        return False


def limit_log_rate(burst: int = 10, window_s: float = 10.0) -> None:
    """Put a `RateLimitFilter` on every handler of the root logger (idempotent)."""
    for handler in logging.getLogger().handlers:
        _limit(handler, burst, window_s)


def limit_logger_rate(prefix: str, burst: int = 10, window_s: float = 10.0) -> None:
    """Put a `RateLimitFilter` on the logger `prefix` and on every logger under it that
    exists now (idempotent): for a library's own loggers in a process whose handlers are
    not ours, such as an application using the Python client (aiokafka logs every failed
    reconnect, ~10 lines a second while a broker is away)."""
    names = [prefix, *(n for n in logging.root.manager.loggerDict if n.startswith(f"{prefix}."))]
    for name in names:
        _limit(logging.getLogger(name), burst, window_s)


def _limit(target: logging.Filterer, burst: int, window_s: float) -> None:
    """A `RateLimitFilter` on a handler or a logger, unless it has one."""
    if not any(isinstance(f, RateLimitFilter) for f in target.filters):
        target.addFilter(RateLimitFilter(burst, window_s))

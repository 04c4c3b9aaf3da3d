"""Liveness and readiness of this process, for `/healthz` and `/readyz` (Kubernetes probes).

Live: the event loop still runs (it beats every second; a loop stuck for `stall_after_s`
is not live, and the kubelet restarts the container). Ready: the service says it serves
(a worker with its engine loaded and its lease fresh, ingest with its consumers started);
a draining or starting one is live but not ready.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


class Health:
    """What the probes answer; one per process (`HEALTH`)."""

    def __init__(
        self, *, stall_after_s: float = 30.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.stall_after_s = stall_after_s
        self._clock = clock
        self._beat: float | None = None
        self._readiness: Callable[[], tuple[bool, str]] = lambda: (False, "starting")

    def beat(self) -> None:
        """The event loop ran just now."""
        self._beat = self._clock()

    def serve_readiness(self, readiness: Callable[[], tuple[bool, str]]) -> None:
        """How the service tells whether it is ready: (ready, why)."""
        self._readiness = readiness

    def live(self) -> tuple[bool, str]:
        if self._beat is None:
            return True, "starting"
        stalled = self._clock() - self._beat
        if stalled > self.stall_after_s:
            return False, f"event loop stalled for {stalled:.0f}s"
        return True, "ok"

    def ready(self) -> tuple[bool, str]:
        alive, why = self.live()
        if not alive:
            return False, why
        try:
            return self._readiness()
        except Exception as exc:  # a readiness check that fails says not ready, and why
            return False, f"readiness check failed: {exc!r}"

    def serve(self, readiness: Callable[[], tuple[bool, str]]) -> asyncio.Task[None]:
        """Answer for a service: its readiness, and a beat from the running event loop (the
        task beats until the caller cancels it)."""
        self.serve_readiness(readiness)
        return asyncio.create_task(self.keep_beating(), name="health")

    async def keep_beating(self, every_s: float = 1.0) -> None:
        """Beat from the event loop until cancelled."""
        while True:
            self.beat()
            await asyncio.sleep(every_s)


HEALTH = Health()
"""This process's health, served next to `/metrics`."""

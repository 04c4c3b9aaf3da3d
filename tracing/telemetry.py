"""Publishes this process's stage histograms (and worker load) to `inferbus.telemetry`."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime

from infra.tasks import wait_event
from schemas.telemetry import Heartbeat, WorkerLoad
from schemas.topics import TELEMETRY, Lane, Tier
from tracing.breakdown import StageBreakdown, default_breakdown

log = logging.getLogger(__name__)

Send = Callable[[str, bytes, bytes], Awaitable[None]]
"""(topic, key, value) -> produced and acked."""


def _utcnow() -> datetime:
    return datetime.now(UTC)


class TelemetryPublisher:
    """Every `interval_s` (`idle_interval_s` while quiet), one `Heartbeat` with the
    breakdown's snapshot; a last one on stop.

    A heartbeat that fails to send is logged and its histograms merged back, so the next
    one carries them: the scaler loses no samples to one broker hiccup.
    """

    def __init__(
        self,
        send: Send,
        *,
        instance_id: str,
        service: str,
        model: str | None = None,
        tiers: Sequence[Tier] = (),
        lane: Lane | None = None,
        model_version: Callable[[], str | None] | None = None,
        interval_s: float = 5.0,
        idle_interval_s: float = 10.0,
        load_provider: Callable[[], WorkerLoad | None] | None = None,
        breakdown: StageBreakdown | None = None,
        clock: Callable[[], datetime] = _utcnow,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be positive, got {interval_s}")
        self._send = send
        self._instance_id = instance_id
        self._service = service
        self._model = model
        self._tiers = list(tiers)
        self._lane = lane
        self._model_version = model_version
        """() -> the version served now (a worker switches versions while it runs)."""
        self._interval_s = interval_s
        self._idle_interval_s = max(idle_interval_s, interval_s)
        self._quiet = False
        self._load_provider = load_provider
        self._breakdown = breakdown if breakdown is not None else default_breakdown()
        self._clock = clock
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.sent = 0
        """Heartbeats acked so far."""

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        """Start the loop on the running event loop; a second call does nothing."""
        if self.running:
            return
        self._stopping.clear()
        self._task = asyncio.create_task(self._run(), name=f"telemetry-{self._instance_id}")

    async def stop(self) -> None:
        """Stop the loop and send a final heartbeat; safe to call twice or before start."""
        task, self._task = self._task, None
        if task is None:
            return
        self._stopping.set()
        await task
        await self.publish_now()

    async def publish_now(self) -> bool:
        """Build and send one heartbeat now; False (logged, samples kept) when sending failed."""
        histograms = self._breakdown.snapshot_and_reset()
        load = self._load_provider() if self._load_provider else None
        self._quiet = not histograms and (load is None or (load.samples == 0 and not load.queued))
        heartbeat = Heartbeat(
            instance_id=self._instance_id,
            service=self._service,
            model=self._model,
            tiers=self._tiers,
            lane=self._lane,
            model_version=self._model_version() if self._model_version else None,
            at=self._clock(),
            interval_s=self._idle_interval_s if self._quiet else self._interval_s,
            load=load,
            histograms=histograms,
        )
        try:
            await self._send(
                TELEMETRY, self._instance_id.encode(), heartbeat.model_dump_json().encode()
            )
        except Exception as exc:
            log.warning(
                "telemetry.send_failed instance=%s error=%s histograms_kept=%d",
                self._instance_id,
                type(exc).__name__,
                len(histograms),
            )
            self._breakdown.restore(histograms)
            return False
        self.sent += 1
        return True

    async def _run(self) -> None:
        # A quiet process (nothing recorded, nothing in hand) beats every idle_interval_s:
        # the scaler reads the heartbeat's own interval, and the broker is spared.
        while not self._stopping.is_set():
            wait = self._idle_interval_s if self._quiet else self._interval_s
            await wait_event(self._stopping, wait)
            if not self._stopping.is_set():
                await self.publish_now()

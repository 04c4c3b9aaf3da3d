"""The telemetry feed: consumes `inferbus.telemetry` and keeps the newest heartbeat per worker."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime

from pydantic import ValidationError

from infra.feed import FEED_WAIT_MS, TopicFeed
from scaler.collector.load import latest
from schemas.telemetry import Heartbeat
from schemas.topics import TELEMETRY

log = logging.getLogger(__name__)

HeartbeatSink = Callable[[Heartbeat], None]
"""Also called with every heartbeat (e.g. the stage-histogram windows)."""


class TelemetryFeed(TopicFeed):
    """Reads heartbeats from now on (no group, so every scaler sees all of them)."""

    def __init__(
        self,
        bootstrap: str,
        sinks: Sequence[HeartbeatSink] = (),
        topic: str = TELEMETRY,
        poll_timeout_ms: int = FEED_WAIT_MS,
    ) -> None:
        super().__init__(
            bootstrap,
            topic,
            self._apply,
            name="telemetry",
            start_at="latest",
            poll_timeout_ms=poll_timeout_ms,
        )
        self._sinks = tuple(sinks)
        self.heartbeats: dict[str, Heartbeat] = {}
        """Newest heartbeat per instance id."""
        self.invalid = 0

    def observe(self, heartbeat: Heartbeat) -> None:
        """Fold one heartbeat (also how tests and the embedded stack feed it directly)."""
        self.heartbeats = latest(self.heartbeats, heartbeat)
        for sink in self._sinks:
            sink(heartbeat)

    def prune(self, now: datetime, max_age_s: float) -> None:
        """Forget workers silent for longer than `max_age_s` (they are gone or partitioned)."""
        self.heartbeats = {
            k: hb for k, hb in self.heartbeats.items() if (now - hb.at).total_seconds() <= max_age_s
        }

    def _apply(self, _key: bytes | None, value: bytes | None) -> None:
        if value is None:
            return
        try:
            heartbeat = Heartbeat.model_validate_json(value)
        except ValidationError as exc:
            self.invalid += 1
            log.warning("event=heartbeat_invalid error=%s", exc.errors()[:1])
            return
        self.observe(heartbeat)

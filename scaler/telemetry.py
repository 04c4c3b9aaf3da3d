"""Merges heartbeats from every instance into sliding per-(model, tier, stage) windows, one
set per rollout lane (a canary group's latencies are its own)."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from schemas.telemetry import Heartbeat, WorkerLoad
from schemas.topics import LANES, Lane
from tracing.histogram import LatencyHistogram

log = logging.getLogger(__name__)

StageKey = tuple[str, str, str]
"""(model, tier, stage)."""


@dataclass(frozen=True, slots=True)
class StageStats:
    """One stage's latency over the window, in ms."""

    count: int
    p50_ms: float
    p95_ms: float
    p99_ms: float
    mean_ms: float
    max_ms: float


class StageWindows:
    """Histograms in `slot_s` slots by heartbeat time; only the last `window_s` count.

    Memory per key is at most window_s/slot_s + 1 histograms, each bounded; a key whose
    slots have all expired is dropped. Time comes from `clock` (epoch seconds).
    """

    def __init__(
        self,
        *,
        window_s: float = 60.0,
        slot_s: float = 5.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if window_s <= 0 or slot_s <= 0 or slot_s > window_s:
            raise ValueError(f"need 0 < slot_s <= window_s, got {slot_s=} {window_s=}")
        self.window_s = window_s
        self.slot_s = slot_s
        self._clock = clock
        self._slots: dict[StageKey, dict[int, LatencyHistogram]] = {}

    def add(self, key: StageKey, at_s: float, histogram: LatencyHistogram) -> None:
        """Merge one instance's interval for `key`, observed at `at_s` (epoch s)."""
        now = self._clock()
        if at_s < now - self.window_s:
            return
        # A heartbeat from a clock ahead of ours counts as now, not as the future.
        slot = math.floor(min(at_s, now) / self.slot_s)
        slots = self._slots.setdefault(key, {})
        current = slots.get(slot)
        if current is None:
            slots[slot] = histogram.copy()
        else:
            current.merge(histogram)

    def expire(self) -> None:
        """Drop slots (and keys) that have left the window."""
        oldest = math.floor((self._clock() - self.window_s) / self.slot_s)
        for key in list(self._slots):
            slots = self._slots[key]
            for slot in [s for s in slots if s < oldest]:
                del slots[slot]
            if not slots:
                del self._slots[key]

    def histogram(self, key: StageKey) -> LatencyHistogram | None:
        """All of `key`'s samples in the window, merged; None when there are none."""
        self.expire()
        slots = self._slots.get(key)
        if not slots:
            return None
        merged: LatencyHistogram | None = None
        for hist in slots.values():
            if merged is None:
                merged = hist.copy()
            else:
                merged.merge(hist)
        return merged

    def stats(self, model: str, tier: str, stage: str) -> StageStats | None:
        """p50/p95/p99, mean, max and count for one stage over the window."""
        hist = self.histogram((model, tier, stage))
        if hist is None or hist.count == 0:
            return None
        return StageStats(
            count=hist.count,
            p50_ms=hist.quantile(0.5) or 0.0,
            p95_ms=hist.quantile(0.95) or 0.0,
            p99_ms=hist.quantile(0.99) or 0.0,
            mean_ms=hist.mean or 0.0,
            max_ms=hist.max,
        )

    def snapshot(self) -> dict[StageKey, StageStats]:
        """Stats for every key with samples in the window."""
        self.expire()
        out: dict[StageKey, StageStats] = {}
        for model, tier, stage in sorted(self._slots):
            stats = self.stats(model, tier, stage)
            if stats is not None:
                out[(model, tier, stage)] = stats
        return out


@dataclass(frozen=True, slots=True)
class InstanceLoad:
    """The latest load one instance reported, and when."""

    at_s: float
    service: str
    model: str | None
    load: WorkerLoad


LOADS_PRUNE_MIN = 64
"""Instances' last loads kept before the first pruning in `apply`."""


class TelemetryReader:
    """The scaler's view of `inferbus.telemetry`: stage windows plus each instance's last load."""

    def __init__(
        self,
        *,
        window_s: float = 60.0,
        slot_s: float = 5.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.lanes: dict[Lane, StageWindows] = {
            lane: StageWindows(window_s=window_s, slot_s=slot_s, clock=clock) for lane in LANES
        }
        """Per lane: canary workers' heartbeats fold apart from everyone else's."""
        self._clock = clock
        self._loads: dict[str, InstanceLoad] = {}
        self._prune_above = LOADS_PRUNE_MIN
        self.invalid = 0
        """Heartbeats or histograms that could not be read."""

    @property
    def windows(self) -> StageWindows:
        """The stable lane's windows (every process that is not a canary worker)."""
        return self.lanes["stable"]

    def apply(self, heartbeat: Heartbeat) -> None:
        """Fold one heartbeat in (pure: no I/O)."""
        at_s = heartbeat.at.timestamp()
        windows = self.lanes[heartbeat.lane or "stable"]
        for entry in heartbeat.histograms:
            parsed = _entry(entry)
            if parsed is None:
                self.invalid += 1
                continue
            windows.add(parsed[0], at_s, parsed[1])
        if heartbeat.load is not None:
            self._loads[heartbeat.instance_id] = InstanceLoad(
                at_s, heartbeat.service, heartbeat.model, heartbeat.load
            )
            if len(self._loads) > self._prune_above:
                # Instances that stopped sending (replaced, killed) go once the table has
                # doubled since the last pruning: amortized O(1) a heartbeat.
                self._prune(at_s - self.windows.window_s)

    def apply_bytes(self, value: bytes) -> bool:
        """Parse and fold one record value; False (counted, logged) when it is not a Heartbeat."""
        try:
            heartbeat = Heartbeat.model_validate_json(value)
        except ValidationError as exc:
            self.invalid += 1
            log.warning("telemetry.invalid errors=%d", exc.error_count())
            return False
        self.apply(heartbeat)
        return True

    def loads(self) -> dict[str, InstanceLoad]:
        """Each instance's last load, for instances heard from within the window."""
        self._prune(self._clock() - self.windows.window_s)
        return dict(self._loads)

    def _prune(self, oldest_s: float) -> None:
        self._loads = {k: v for k, v in self._loads.items() if v.at_s >= oldest_s}
        self._prune_above = max(LOADS_PRUNE_MIN, 2 * len(self._loads))


def _entry(entry: dict[str, Any]) -> tuple[StageKey, LatencyHistogram] | None:
    try:
        key = (str(entry["model"]), str(entry["tier"]), str(entry["stage"]))
        return key, LatencyHistogram.from_dict(entry)
    except (KeyError, TypeError, ValueError) as exc:
        log.warning("telemetry.bad_histogram error=%s", type(exc).__name__)
        return None


async def consume_telemetry(
    consumer: Any, reader: TelemetryReader, *, stop: asyncio.Event, poll_ms: int = 500
) -> None:
    """Feed an aiokafka consumer (subscribed to `inferbus.telemetry`) into `reader` until `stop`.

    Telemetry is a gauge, not a ledger: offsets are not committed and a restart reads
    from the latest heartbeats.
    """
    while not stop.is_set():
        batches = await consumer.getmany(timeout_ms=poll_ms)
        for records in batches.values():
            for record in records:
                if record.value is not None:
                    reader.apply_bytes(record.value)

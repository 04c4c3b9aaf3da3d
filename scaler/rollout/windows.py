"""Per model version: results by status and end-to-end latency over a sliding window, from
the workers' heartbeats (the verdict's inputs)."""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from schemas.telemetry import Heartbeat
from tracing.histogram import LatencyHistogram

log = logging.getLogger(__name__)

VersionKey = tuple[str, str]
"""(model, version)."""
ERROR_STATUSES = frozenset({"internal_error"})
"""What counts against a version: it failed. Client mistakes, deadlines that passed in the
queue (a sizing matter) and overload answers do not."""


@dataclass(frozen=True)
class VersionStats:
    """One version's results over a window."""

    requests: int
    """Terminal results its workers sent."""
    errors: int
    """Of them, `ERROR_STATUSES`."""
    p99_ms: float | None
    """p99 end-to-end of its ok results; None without any."""

    @property
    def error_rate(self) -> float:
        return self.errors / self.requests if self.requests else 0.0


@dataclass
class _Slot:
    results: Counter[str] = field(default_factory=Counter)
    e2e: LatencyHistogram | None = None


class VersionWindows:
    """Slots of `slot_s` by heartbeat time, kept for `retain_s`; any window up to that long
    is read back. Only worker heartbeats that name their version count."""

    def __init__(
        self,
        *,
        retain_s: float = 3600.0,
        slot_s: float = 5.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if retain_s <= 0 or not 0 < slot_s <= retain_s:
            raise ValueError(f"need 0 < slot_s <= retain_s, got {slot_s=} {retain_s=}")
        self.retain_s = retain_s
        self.slot_s = slot_s
        self._clock = clock
        self._slots: dict[VersionKey, dict[int, _Slot]] = {}
        self.invalid = 0
        """Histograms that could not be read (logged, skipped)."""

    def apply(self, heartbeat: Heartbeat) -> None:
        """Fold one heartbeat (pure: no I/O)."""
        model, version = heartbeat.model, heartbeat.model_version
        if model is None or version is None:
            return
        now = self._clock()
        at_s = heartbeat.at.timestamp()
        if at_s < now - self.retain_s:
            return
        index = math.floor(min(at_s, now) / self.slot_s)
        slot = self._slots.setdefault((model, version), {}).setdefault(index, _Slot())
        if heartbeat.load is not None:
            slot.results.update(heartbeat.load.results)
        for entry in heartbeat.histograms:
            if entry.get("stage") != "e2e" or entry.get("model") != model:
                continue
            try:
                histogram = LatencyHistogram.from_dict(entry)
            except (KeyError, TypeError, ValueError) as exc:
                self.invalid += 1
                log.warning("event=rollout_histogram_invalid error=%s", type(exc).__name__)
                continue
            if slot.e2e is None:
                slot.e2e = histogram
            else:
                slot.e2e.merge(histogram)
        self._expire(now)

    def stats(
        self, model: str, version: str, window_s: float, *, ended_s_ago: float = 0.0
    ) -> VersionStats:
        """The version's results over the last `window_s` (at most `retain_s`), or over the
        part of it that ended `ended_s_ago` (its older stretch: with `window_s / 2`, the
        older half; `stats(..., window_s / 2)` is the newer)."""
        now = self._clock()
        oldest = math.floor((now - min(window_s, self.retain_s)) / self.slot_s)
        newest = math.floor((now - ended_s_ago) / self.slot_s) if ended_s_ago > 0 else math.inf
        results: Counter[str] = Counter()
        e2e: LatencyHistogram | None = None
        for index, slot in self._slots.get((model, version), {}).items():
            if not oldest <= index < newest:
                continue
            results.update(slot.results)
            if slot.e2e is not None:
                if e2e is None:
                    e2e = slot.e2e.copy()
                else:
                    e2e.merge(slot.e2e)
        errors = sum(n for status, n in results.items() if status in ERROR_STATUSES)
        p99 = e2e.quantile(0.99) if e2e is not None and e2e.count else None
        return VersionStats(sum(results.values()), errors, p99)

    def _expire(self, now: float) -> None:
        oldest = math.floor((now - self.retain_s) / self.slot_s)
        for key in list(self._slots):
            slots = self._slots[key]
            for index in [i for i in slots if i < oldest]:
                del slots[index]
            if not slots:
                del self._slots[key]

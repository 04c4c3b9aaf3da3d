"""Per-(model, tier, stage) latency histograms of every request, traced or not.

Ingest and the worker record each request's stage times here as they answer it (a poll
or a batch at a time); telemetry heartbeats carry the snapshots to the scaler, and the
Prometheus histograms see the same samples.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from tracing.attributes import STAGES, SUMMED_STAGES
from tracing.histogram import DEFAULT_RELATIVE_ACCURACY, LatencyHistogram

StageKey = tuple[str, str, str]
"""(model, tier, stage)."""
StageObserver = Callable[[str, str, str, np.ndarray[Any, Any]], None]
"""Called with (model, tier, stage, values in ms) for every recording, e.g. Prometheus."""

_STAGES = (*STAGES, *SUMMED_STAGES)
_KNOWN = frozenset(_STAGES)


class StageBreakdown:
    """Stage histograms, reset at every snapshot; thread-safe."""

    def __init__(
        self,
        *,
        relative_accuracy: float = DEFAULT_RELATIVE_ACCURACY,
        observers: Iterable[StageObserver] = (),
    ) -> None:
        self._accuracy = relative_accuracy
        self._observers = tuple(observers)
        self._lock = threading.Lock()
        self._histograms: dict[StageKey, LatencyHistogram] = {}

    def add_observer(self, observer: StageObserver) -> None:
        """Also call `observer` for every recording from now on."""
        with self._lock:
            self._observers = (*self._observers, observer)

    def record_stage(self, model: str, tier: str, stage: str, ms: float, count: int = 1) -> None:
        """One stage duration, `count` times."""
        self.record_many(model, tier, stage, np.full(count, ms, dtype=np.float64))

    def record_many(self, model: str, tier: str, stage: str, values: Any) -> None:
        """Many requests' durations of one stage (ms; NaN means the stage did not apply)."""
        if stage not in _KNOWN:
            raise ValueError(f"unknown stage {stage!r}; expected one of {', '.join(_STAGES)}")
        array = np.asarray(values, dtype=np.float64)
        if array.size == 0:
            return
        key = (model, tier, stage)
        with self._lock:
            hist = self._histograms.get(key)
            if hist is None:
                hist = self._histograms[key] = LatencyHistogram(self._accuracy)
            hist.record_many(array)
            observers = self._observers
        for observer in observers:
            observer(model, tier, stage, array)

    def snapshot_and_reset(self) -> list[dict[str, Any]]:
        """Entries shaped for `Heartbeat.histograms`, and start a fresh interval."""
        with self._lock:
            histograms, self._histograms = self._histograms, {}
        return [
            {"model": model, "tier": tier, "stage": stage, **hist.to_dict()}
            for (model, tier, stage), hist in sorted(histograms.items())
            if hist.count
        ]

    def restore(self, entries: Iterable[Mapping[str, Any]]) -> None:
        """Merge a snapshot back, e.g. after a heartbeat failed to send."""
        with self._lock:
            for entry in entries:
                key = (str(entry["model"]), str(entry["tier"]), str(entry["stage"]))
                hist = LatencyHistogram.from_dict(entry)
                current = self._histograms.get(key)
                if current is None:
                    self._histograms[key] = hist
                else:
                    current.merge(hist)


_default = StageBreakdown()


def default_breakdown() -> StageBreakdown:
    """This process's breakdown."""
    return _default


def record_stage(model: str, tier: str, stage: str, ms: float, count: int = 1) -> None:
    """Record a stage duration into this process's breakdown."""
    _default.record_stage(model, tier, stage, ms, count)


def record_stages(model: str, tier: str, stages: Mapping[str, Any]) -> None:
    """Record several stages' per-request durations (arrays in ms) at once."""
    for stage, values in stages.items():
        _default.record_many(model, tier, stage, values)


def with_sums(stages: Mapping[str, Any]) -> dict[str, np.ndarray[Any, Any]]:
    """`stages` (per-request arrays in ms, NaN where a stage did not apply) and each of
    `SUMMED_STAGES` whose parts are all among them: per request, the sum of the parts that
    applied (NaN where none did)."""
    out = {stage: np.asarray(values, dtype=np.float64) for stage, values in stages.items()}
    for summed, parts in SUMMED_STAGES.items():
        if all(part in out for part in parts):
            stacked = np.vstack([out[part] for part in parts])
            total = np.nansum(stacked, axis=0)
            total[np.isnan(stacked).all(axis=0)] = np.nan
            out[summed] = total
    return out

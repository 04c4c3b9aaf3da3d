"""Folds stage spans and stage timings into per-(model, tier, stage) latency histograms."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.trace import StatusCode

from tracing.attributes import MODEL, REQUEST_COUNT, STAGE, STAGES, TIER
from tracing.histogram import DEFAULT_RELATIVE_ACCURACY, LatencyHistogram

StageKey = tuple[str, str, str]
"""(model, tier, stage)."""
StageObserver = Callable[[str, str, str, float, int], None]
"""Called with (model, tier, stage, ms, count) for every observation, e.g. Prometheus."""

_STAGES = frozenset(STAGES)


class StageBreakdown(SpanProcessor):
    """A span processor: every ended span with `inferbus.stage`, model and tier is one sample.

    Spans whose status is ERROR are left out (a rejected request's fast path would flatter
    the latency); `inferbus.request_count` weights a batch span by the requests it served.
    Thread-safe: spans end on the event loop and in engine threads alike.
    """

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
        """Also call `observer` for every sample from now on."""
        with self._lock:
            self._observers = (*self._observers, observer)

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        """Nothing to do until the span ends."""

    def on_end(self, span: ReadableSpan) -> None:
        attributes = span.attributes
        if not attributes:
            return
        stage = attributes.get(STAGE)
        model = attributes.get(MODEL)
        tier = attributes.get(TIER)
        if not isinstance(stage, str) or stage not in _STAGES:
            return
        if not isinstance(model, str) or not isinstance(tier, str):
            return
        if span.status.status_code is StatusCode.ERROR:
            return
        if span.start_time is None or span.end_time is None:
            return
        weight = attributes.get(REQUEST_COUNT, 1)
        count = weight if isinstance(weight, int) and weight > 0 else 1
        self._record(model, tier, stage, (span.end_time - span.start_time) / 1e6, count)

    def record_stage(self, model: str, tier: str, stage: str, ms: float, count: int = 1) -> None:
        """Record a stage duration that is not a span (e.g. e2e from timestamps)."""
        if stage not in _STAGES:
            raise ValueError(f"unknown stage {stage!r}; expected one of {', '.join(STAGES)}")
        self._record(model, tier, stage, ms, count)

    def _record(self, model: str, tier: str, stage: str, ms: float, count: int) -> None:
        key = (model, tier, stage)
        with self._lock:
            hist = self._histograms.get(key)
            if hist is None:
                hist = self._histograms[key] = LatencyHistogram(self._accuracy)
            hist.record(ms, count)
            observers = self._observers
        for observer in observers:
            observer(model, tier, stage, ms, count)

    def snapshot_and_reset(self) -> list[dict[str, Any]]:
        """Entries shaped for `Heartbeat.histograms`, and start a fresh interval."""
        with self._lock:
            histograms, self._histograms = self._histograms, {}
        return [
            {"model": model, "tier": tier, "stage": stage, **hist.to_dict()}
            for (model, tier, stage), hist in sorted(histograms.items())
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

    def shutdown(self) -> None:
        """Nothing held outside memory."""

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Samples are folded synchronously; nothing to flush."""
        return True


_default = StageBreakdown()


def default_breakdown() -> StageBreakdown:
    """This process's breakdown, installed on the provider by `init_tracing`."""
    return _default


def record_stage(model: str, tier: str, stage: str, ms: float, count: int = 1) -> None:
    """Record a stage duration into this process's breakdown (for stages that are not spans)."""
    _default.record_stage(model, tier, stage, ms, count)

"""When the worker's engine will be free, from how long its batches take per sample."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

Shape = int | None
"""A batch's padded sequence length (its length bucket); None for models without one."""

EARLY = 0.9
"""Predictions are this share of the smoothed time: a fetch held until a prediction that
errs late would leave the engine idle, one that errs early costs a fetch."""


def size_class(samples: int) -> int:
    """Batch sizes grouped by powers of two (1, 2-3, 4-7, 8-15, ...): within a class the
    time per sample is close, across classes a batch's fixed cost moves it."""
    return samples.bit_length()


class EngineClock:
    """Predicts when the batches in the engine's hands end.

    Time per sample is smoothed per length bucket and batch size class: a batch of
    256-token sequences costs far more a sample than one of 32, and a batch of 2 more a
    sample than one of 32 (its fixed cost spread over fewer samples). A batch is predicted
    from its own class or, if that has not run yet, the nearest larger class of its bucket
    (cheaper a sample: the prediction errs early); with neither, nothing is predicted and
    nothing is held.
    """

    def __init__(
        self, *, smoothing: float = 0.2, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._smoothing = smoothing
        self._clock = clock
        self._in_engine: deque[float | None] = deque()
        """Predicted seconds of each batch handed and not finished, oldest first."""
        self._head_started = 0.0
        """When the oldest batch in hand started (the engine runs one at a time)."""
        self._per_sample_s: dict[tuple[Shape, int], float] = {}

    def per_sample_s(self, samples: int, shape: Shape = None) -> float | None:
        """The smoothed engine seconds a sample takes in a batch of `samples` (its class,
        else the nearest larger class of its bucket; None: neither ran yet)."""
        own = size_class(samples)
        known = [c for (s, c) in self._per_sample_s if s == shape and c >= own]
        return self._per_sample_s[(shape, min(known))] if known else None

    def handed(self, samples: int, shape: Shape = None) -> float | None:
        """A batch went to the engine: when all it holds should be done (None: unknown)."""
        if not self._in_engine:
            self._head_started = self._clock()
        per_sample = self.per_sample_s(samples, shape)
        self._in_engine.append(None if per_sample is None else samples * per_sample * EARLY)
        return self.free_at()

    def finished(self) -> float | None:
        """The oldest batch ended: when the rest should be done (None: free, or unknown)."""
        if self._in_engine:
            self._in_engine.popleft()
            self._head_started = self._clock()
        return self.free_at()

    def ran(self, samples: int, seconds: float, shape: Shape = None) -> None:
        """A batch of `samples` took `seconds` of engine time."""
        if samples <= 0:
            return
        key = (shape, size_class(samples))
        observed = seconds / samples
        known = self._per_sample_s.get(key)
        self._per_sample_s[key] = (
            observed if known is None else known + self._smoothing * (observed - known)
        )

    def free_at(self) -> float | None:
        """When the batches in hand should all be done; None when the engine is free or a
        batch in hand has no prediction (then nothing is held)."""
        if not self._in_engine or any(s is None for s in self._in_engine):
            return None
        return self._head_started + sum(s for s in self._in_engine if s is not None)

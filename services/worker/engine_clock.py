"""When the worker's engine will be free, from how long its batches take per sample."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable


class EngineClock:
    """Predicts when the batches in the engine's hands end.

    The prediction is per sample (a smoothed mean of the batches run so far), so a small
    batch is predicted short: where a batch has a fixed cost, the prediction errs early,
    and a fetch held until then (infra.pacing) returns before the engine frees, not after.
    Nothing is predicted before the first batch ran.
    """

    def __init__(
        self, *, smoothing: float = 0.2, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._smoothing = smoothing
        self._clock = clock
        self._in_engine: deque[float] = deque()
        """Predicted seconds of each batch handed and not finished, oldest first."""
        self._head_started = 0.0
        """When the oldest batch in hand started (the engine runs one at a time)."""
        self.per_sample_s: float | None = None

    def handed(self, samples: int) -> float | None:
        """A batch of `samples` went to the engine: when all it holds should be done."""
        if not self._in_engine:
            self._head_started = self._clock()
        self._in_engine.append(samples * (self.per_sample_s or 0.0))
        return self.free_at()

    def finished(self) -> float | None:
        """The oldest batch ended: when the rest should be done (None: the engine is free)."""
        if self._in_engine:
            self._in_engine.popleft()
            self._head_started = self._clock()
        return self.free_at()

    def ran(self, samples: int, seconds: float) -> None:
        """A batch of `samples` took `seconds` of engine time."""
        if samples <= 0:
            return
        observed = seconds / samples
        if self.per_sample_s is None:
            self.per_sample_s = observed
        else:
            self.per_sample_s += self._smoothing * (observed - self.per_sample_s)

    def free_at(self) -> float | None:
        """When the batches in hand should all be done (None: free, or nothing known yet)."""
        if self.per_sample_s is None or not self._in_engine:
            return None
        return self._head_started + sum(self._in_engine)

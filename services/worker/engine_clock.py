"""When the worker's engine will be free, from how long its batches take per sample."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

Shape = int | None
"""A batch's padded sequence length (its length bucket); None for models without one."""


class EngineClock:
    """Predicts when the batches in the engine's hands end.

    The prediction is per sample and per length bucket (a smoothed mean of the batches of
    that bucket run so far): a batch of 256-token sequences costs far more a sample than
    one of 32. A small batch with a fixed cost is predicted short, so a fetch held until
    the prediction (infra.pacing) returns before the engine frees, not after. Nothing is
    predicted for a bucket before one of its batches ran.
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
        self._per_sample_s: dict[Shape, float] = {}

    def per_sample_s(self, shape: Shape = None) -> float | None:
        """The smoothed engine seconds a sample of `shape` takes (None: none ran yet)."""
        return self._per_sample_s.get(shape)

    def handed(self, samples: int, shape: Shape = None) -> float | None:
        """A batch went to the engine: when all it holds should be done (None: unknown)."""
        if not self._in_engine:
            self._head_started = self._clock()
        per_sample = self._per_sample_s.get(shape)
        self._in_engine.append(None if per_sample is None else samples * per_sample)
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
        observed = seconds / samples
        known = self._per_sample_s.get(shape)
        self._per_sample_s[shape] = (
            observed if known is None else known + self._smoothing * (observed - known)
        )

    def free_at(self) -> float | None:
        """When the batches in hand should all be done; None when the engine is free or a
        batch in hand has no prediction (then nothing is held)."""
        if not self._in_engine or any(s is None for s in self._in_engine):
            return None
        return self._head_started + sum(s for s in self._in_engine if s is not None)

"""A mergeable, bounded-memory latency histogram with relative accuracy (DDSketch-style)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

DEFAULT_RELATIVE_ACCURACY = 0.01
DEFAULT_MAX_BINS = 2048
MIN_TRACKED_MS = 1e-3
"""Values below one microsecond count as zero: latency below that is noise, not signal."""


class LatencyHistogram:
    """Log-bucketed counts of millisecond latencies; any quantile within `relative_accuracy`.

    Bin `i` holds values in (gamma^(i-1), gamma^i] with gamma = (1+a)/(1-a), so the bin's
    representative 2*gamma^i/(gamma+1) is within a relative error `a` of every value in it.
    Memory is bounded by `max_bins`: past it the lowest bins are folded together, which
    only costs accuracy on the lowest quantiles (the tail the scaler reads stays exact).
    """

    __slots__ = (
        "_bins",
        "_gamma",
        "_log_gamma",
        "alpha",
        "count",
        "max",
        "max_bins",
        "min",
        "sum",
        "zero_count",
    )

    def __init__(
        self,
        relative_accuracy: float = DEFAULT_RELATIVE_ACCURACY,
        *,
        max_bins: int = DEFAULT_MAX_BINS,
    ) -> None:
        if not 0.0 < relative_accuracy < 1.0:
            raise ValueError(f"relative_accuracy must be in (0, 1), got {relative_accuracy}")
        if max_bins < 1:
            raise ValueError(f"max_bins must be >= 1, got {max_bins}")
        self.alpha = relative_accuracy
        self.max_bins = max_bins
        self._gamma = (1.0 + relative_accuracy) / (1.0 - relative_accuracy)
        self._log_gamma = math.log(self._gamma)
        self._bins: dict[int, int] = {}
        self.zero_count = 0
        self.count = 0
        self.sum = 0.0
        self.min = math.inf
        self.max = -math.inf

    def record(self, ms: float, count: int = 1) -> None:
        """Add `count` observations of `ms` milliseconds (negative values count as zero)."""
        if not math.isfinite(ms):
            raise ValueError(f"latency must be finite, got {ms}")
        if count < 1:
            raise ValueError(f"count must be >= 1, got {count}")
        ms = max(ms, 0.0)
        if ms < MIN_TRACKED_MS:
            self.zero_count += count
        else:
            index = math.ceil(math.log(ms) / self._log_gamma)
            self._bins[index] = self._bins.get(index, 0) + count
            if len(self._bins) > self.max_bins:
                self._collapse()
        self.count += count
        self.sum += ms * count
        self.min = min(self.min, ms)
        self.max = max(self.max, ms)

    def record_many(self, values: np.ndarray[Any, Any]) -> None:
        """Add every value of a float array at once (a batch's stage times); NaN is skipped."""
        # A batch's 32 values: numpy's per-call cost is the price, so as few calls as can
        # be (np.unique sorted every batch; a dict counts 32 bin indices faster).
        ms = np.asarray(values, dtype=np.float64)
        finite = np.isfinite(ms)
        if not finite.all():
            ms = ms[finite]
        if ms.size == 0:
            return
        low, high = float(ms.min()), float(ms.max())
        if low < MIN_TRACKED_MS:
            ms = np.maximum(ms, 0.0)
            small = ms < MIN_TRACKED_MS
            self.zero_count += int(np.count_nonzero(small))
            tracked = ms[~small]
            low = max(low, 0.0)
        else:
            tracked = ms
        if tracked.size:
            bins = self._bins
            for index in np.ceil(np.log(tracked) / self._log_gamma).astype(np.int64).tolist():
                bins[index] = bins.get(index, 0) + 1
            if len(bins) > self.max_bins:
                self._collapse()
        self.count += int(ms.size)
        self.sum += float(ms.sum())
        self.min = min(self.min, low)
        self.max = max(self.max, high, 0.0)

    def merge(self, other: LatencyHistogram) -> None:
        """Add every observation of `other` (same relative accuracy) into this one."""
        if other.alpha != self.alpha:
            raise ValueError(f"cannot merge accuracy {other.alpha} into {self.alpha}")
        if other.count == 0:
            return
        for index, n in other._bins.items():
            self._bins[index] = self._bins.get(index, 0) + n
        if len(self._bins) > self.max_bins:
            self._collapse()
        self.zero_count += other.zero_count
        self.count += other.count
        self.sum += other.sum
        self.min = min(self.min, other.min)
        self.max = max(self.max, other.max)

    def quantile(self, q: float) -> float | None:
        """The q-quantile (0 <= q <= 1) in ms, or None when empty."""
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"q must be in [0, 1], got {q}")
        if self.count == 0:
            return None
        rank = q * (self.count - 1)
        seen = self.zero_count
        if seen > rank:
            return 0.0 if self.min < MIN_TRACKED_MS else self.min
        for index in sorted(self._bins):
            seen += self._bins[index]
            if seen > rank:
                value = 2.0 * self._gamma**index / (self._gamma + 1.0)
                return min(max(value, self.min), self.max)
        return self.max

    @property
    def mean(self) -> float | None:
        """Mean latency in ms, or None when empty."""
        return self.sum / self.count if self.count else None

    @property
    def bin_count(self) -> int:
        """Non-empty bins held now (the memory in use)."""
        return len(self._bins)

    def copy(self) -> LatencyHistogram:
        """An independent copy."""
        clone = LatencyHistogram(self.alpha, max_bins=self.max_bins)
        clone.merge(self)
        return clone

    def to_dict(self) -> dict[str, Any]:
        """Compact JSON-ready form: sparse bins as delta-encoded indices and their counts."""
        indices = sorted(self._bins)
        deltas = [b - a for a, b in zip([0, *indices], indices, strict=False)]
        out: dict[str, Any] = {
            "alpha": self.alpha,
            "count": self.count,
            "sum": self.sum,
            "zero": self.zero_count,
            "i": deltas,
            "n": [self._bins[i] for i in indices],
        }
        if self.count:
            out["min"] = self.min
            out["max"] = self.max
        return out

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], *, max_bins: int = DEFAULT_MAX_BINS
    ) -> LatencyHistogram:
        """Inverse of `to_dict`; raises ValueError on an inconsistent payload."""
        hist = cls(float(data["alpha"]), max_bins=max_bins)
        deltas = [int(d) for d in data.get("i", [])]
        counts = [int(n) for n in data.get("n", [])]
        if len(deltas) != len(counts) or any(n < 1 for n in counts):
            raise ValueError("histogram bins and counts do not match")
        index = 0
        for delta, n in zip(deltas, counts, strict=True):
            index += delta
            hist._bins[index] = hist._bins.get(index, 0) + n
        hist.zero_count = int(data.get("zero", 0))
        hist.count = int(data["count"])
        if hist.count != hist.zero_count + sum(counts):
            raise ValueError("histogram count does not match its bins")
        hist.sum = float(data.get("sum", 0.0))
        if hist.count:
            hist.min = float(data["min"])
            hist.max = float(data["max"])
        if len(hist._bins) > hist.max_bins:
            hist._collapse()
        return hist

    def _collapse(self) -> None:
        """Fold the lowest bins into one until `max_bins` remain."""
        indices = sorted(self._bins)
        excess = len(indices) - self.max_bins
        if excess <= 0:
            return
        target = indices[excess]
        folded = sum(self._bins.pop(i) for i in indices[:excess])
        self._bins[target] += folded

    def __repr__(self) -> str:
        p50, p99 = self.quantile(0.5), self.quantile(0.99)
        return f"LatencyHistogram(count={self.count}, p50={p50}, p99={p99})"

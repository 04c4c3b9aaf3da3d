"""A closed loop's rate is called window-bound only when the cores had room and Little's law
explains the rate."""

from __future__ import annotations

import pytest

from services.bench.stats import window_bound


@pytest.mark.parametrize(
    ("window", "roundtrip_ms", "served", "busy", "bound"),
    [
        # Stop 32's null-engine runs on 2 cores (docs/benchmarks.md).
        pytest.param(256, 57.8, 4090, 1.56, True, id="window-256-cores-idle"),
        pytest.param(1024, 191.3, 5109, 1.81, False, id="cores-over-90-percent"),
        pytest.param(256, 57.8, 1000, 1.2, False, id="far-below-littles-bound"),
        pytest.param(256, None, 4090, 1.0, False, id="no-round-trip"),
        pytest.param(256, 0.0, 4090, 1.0, False, id="zero-round-trip"),
    ],
)
def test_window_bound(
    window: int, roundtrip_ms: float | None, served: float, busy: float, bound: bool
) -> None:
    note = window_bound(
        window=window, roundtrip_p50_ms=roundtrip_ms, served_rps=served, cores_busy=busy, cores=2
    )

    assert (note is not None) == bound
    if note is not None:
        assert f"{busy:.2f} of 2 cores busy" in note and "--window" in note

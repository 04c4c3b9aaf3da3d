"""A closed loop's rate is called window-bound only when the cores had room and Little's law
explains the rate; its default window fills what every worker takes in hand."""

from __future__ import annotations

import pytest

from services.bench.stats import saturation_window, window_bound


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


@pytest.mark.parametrize(
    ("workers", "in_hand", "batch", "window"),
    [
        pytest.param(2, 4, 32, 256, id="two-minilm-workers-fill-their-hands"),
        pytest.param(1, 4, 32, 128, id="one-worker-at-the-floor"),
        pytest.param(1, 3, 8, 128, id="small-batches-keep-the-floor"),
        pytest.param(4, 4, 64, 1024, id="four-workers-of-64"),
    ],
)
def test_saturation_window_fills_every_workers_hand(
    workers: int, in_hand: int, batch: int, window: int
) -> None:
    assert (
        saturation_window(workers=workers, batches_in_hand=in_hand, max_batch_size=batch) == window
    )

"""What the harness reads from /proc, and the chaos model's capacity."""

from __future__ import annotations

import os
import time

import pytest

from services.chaos.harness import rss_mb, started_at
from services.chaos.model import SimModel


def test_rss_and_start_of_this_process() -> None:
    rss = rss_mb(os.getpid())
    started = started_at(os.getpid())
    assert rss is not None and rss > 10
    assert started is not None and 0 < time.time() - started < 3600


def test_a_gone_process_has_neither() -> None:
    assert rss_mb(2**22 + 1) is None
    assert started_at(2**22 + 1) is None


@pytest.mark.parametrize(
    ("model", "capacity"),
    [
        pytest.param(SimModel(max_batch_size=8, a_ms=20, b_ms=2.5), 200.0, id="default"),
        pytest.param(SimModel(max_batch_size=4, a_ms=60, b_ms=10), 40.0, id="overload"),
    ],
)
def test_capacity_of_the_simulated_model(model: SimModel, capacity: float) -> None:
    assert model.capacity_rps == pytest.approx(capacity)
    assert model.config().engine.kind == "sim"

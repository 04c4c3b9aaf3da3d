"""The throughput bench's open loop: Poisson arrivals, as the peers' load generator draws."""

from __future__ import annotations

import numpy as np
import pytest

from services.bench.loadgen import poisson_arrivals


def test_arrivals_are_ascending_at_the_rate() -> None:
    arrivals = poisson_arrivals(20_000, 300.0, seed=1)

    assert len(arrivals) == 20_000
    assert np.all(np.diff(arrivals) > 0)
    assert arrivals[-1] == pytest.approx(20_000 / 300.0, rel=0.03)


def test_arrivals_are_bursty_not_even() -> None:
    """Exponential gaps: their spread equals their mean (evenly paced would be 0)."""
    gaps = np.diff(poisson_arrivals(20_000, 300.0, seed=2))

    assert gaps.std() == pytest.approx(gaps.mean(), rel=0.05)


def test_a_seed_repeats_its_arrivals() -> None:
    np.testing.assert_array_equal(
        poisson_arrivals(100, 50.0, seed=3), poisson_arrivals(100, 50.0, seed=3)
    )


@pytest.mark.parametrize("rate", [0.0, -1.0])
def test_an_open_loop_needs_a_rate(rate: float) -> None:
    with pytest.raises(ValueError, match="rate above 0"):
        poisson_arrivals(10, rate, seed=1)

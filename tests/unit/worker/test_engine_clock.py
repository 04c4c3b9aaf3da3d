"""When the engine is predicted to be free."""

from __future__ import annotations

import pytest

from services.worker.engine_clock import EngineClock


class _Clock:
    def __init__(self) -> None:
        self.now = 10.0

    def __call__(self) -> float:
        return self.now


def test_nothing_is_predicted_before_a_batch_ran() -> None:
    clock = EngineClock(clock=_Clock())
    assert clock.handed(32) is None
    assert clock.finished() is None


def test_batches_in_hand_add_up_from_the_running_ones_start() -> None:
    now = _Clock()
    clock = EngineClock(clock=now)
    clock.ran(10, 0.1)  # 10 ms a sample
    assert clock.handed(4) == pytest.approx(10.04)
    now.now = 10.03
    assert clock.handed(10) == pytest.approx(10.14)  # queued behind the running one
    now.now = 10.05  # the first ended late; the second starts now
    assert clock.finished() == pytest.approx(10.15)
    assert clock.finished() is None  # the engine is free


@pytest.mark.parametrize(
    ("runs", "expected"),
    [
        ([(10, 0.1)], 0.01),
        ([(10, 0.1), (10, 0.2)], 0.012),  # smoothed 0.2 toward the newest
        ([(10, 0.1), (0, 5.0)], 0.01),  # an empty batch says nothing
    ],
)
def test_per_sample_time_is_smoothed(runs: list[tuple[int, float]], expected: float) -> None:
    clock = EngineClock(smoothing=0.2, clock=_Clock())
    for samples, seconds in runs:
        clock.ran(samples, seconds)
    assert clock.per_sample_s() == pytest.approx(expected)


def test_length_buckets_are_predicted_apart() -> None:
    now = _Clock()
    clock = EngineClock(clock=now)
    clock.ran(8, 0.08, shape=32)  # 10 ms a sample at 32 tokens
    clock.ran(8, 0.8, shape=256)  # 100 ms a sample at 256
    assert clock.handed(4, shape=32) == pytest.approx(10.04)
    assert clock.finished() is None
    assert clock.handed(4, shape=256) == pytest.approx(10.4)
    assert clock.finished() is None
    assert clock.handed(4, shape=64) is None  # no batch of 64 ran yet: nothing held
    assert clock.handed(4, shape=32) is None  # nor behind it

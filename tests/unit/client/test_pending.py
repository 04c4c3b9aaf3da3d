"""The client's pending requests: due until deadline + grace, then lapsed but still ours."""

from __future__ import annotations

import logging

import pytest

from services.client.pending import PendingRequests


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _pending(clock: _Clock, *, capacity: int = 100) -> PendingRequests:
    return PendingRequests(
        grace_s=10.0, unbounded_due_s=600.0, lapsed_capacity=capacity, clock=clock
    )


@pytest.mark.parametrize(
    ("deadline_in_s", "after_s", "due"),
    [
        pytest.param(5.0, 14.9, True, id="before-deadline-plus-grace"),
        pytest.param(5.0, 15.0, False, id="at-deadline-plus-grace"),
        pytest.param(-3.0, 9.9, True, id="already-past-deadline-gets-the-grace"),
        pytest.param(-3.0, 10.0, False, id="already-past-deadline-then-lapses"),
        pytest.param(None, 599.9, True, id="no-deadline-due-for-long"),
        pytest.param(None, 600.0, False, id="no-deadline-lapses-too"),
    ],
)
def test_a_request_is_due_until_its_deadline_and_grace(
    deadline_in_s: float | None, after_s: float, due: bool
) -> None:
    clock = _Clock()
    pending = _pending(clock)
    pending.add("r1", deadline_in_s=deadline_in_s)
    clock.now += after_s
    assert pending.any_due() is due
    assert "r1" in pending  # lapsed or not, a result that comes is still ours
    assert pending.lapsed_total == (0 if due else 1)


def test_an_answered_request_is_neither_due_nor_ours() -> None:
    clock = _Clock()
    pending = _pending(clock)
    pending.add("r1", deadline_in_s=5.0)
    pending.answered("r1")
    assert not pending.any_due()
    assert "r1" not in pending
    clock.now += 60.0
    assert not pending.any_due()
    assert pending.lapsed_total == 0  # answered in time: never counted as overdue


def test_a_lapsed_request_answered_late_is_forgotten() -> None:
    clock = _Clock()
    pending = _pending(clock)
    pending.add("r1", deadline_in_s=1.0)
    clock.now += 20.0
    assert not pending.any_due()
    pending.answered("r1")
    assert "r1" not in pending


def test_sent_again_it_is_due_from_the_new_send() -> None:
    """A resend (the broker lost it) restarts its time; the old heap entry is ignored."""
    clock = _Clock()
    pending = _pending(clock)
    pending.add("r1", deadline_in_s=5.0)
    clock.now += 10.0
    pending.add("r1", deadline_in_s=5.0)
    clock.now += 6.0  # past the first send's time, within the second's
    assert pending.any_due()
    assert pending.lapsed_total == 0


def test_lapsed_memory_is_bounded_oldest_first(caplog: pytest.LogCaptureFixture) -> None:
    clock = _Clock()
    pending = _pending(clock, capacity=2)
    for i in range(3):
        pending.add(f"r{i}", deadline_in_s=0.0)
    clock.now += 11.0
    with caplog.at_level(logging.WARNING, logger="services.client.pending"):
        assert not pending.any_due()
    assert pending.lapsed_total == 3
    assert "r0" not in pending
    assert "r1" in pending and "r2" in pending
    assert "event=results_overdue count=3" in caplog.text


def test_only_the_overdue_lapse() -> None:
    clock = _Clock()
    pending = _pending(clock)
    pending.add("short", deadline_in_s=1.0)
    pending.add("long", deadline_in_s=100.0)
    clock.now += 20.0
    assert pending.any_due()  # "long" is still due
    assert pending.lapsed_total == 1


def test_a_failed_send_is_not_due_nor_overdue_but_still_ours() -> None:
    clock = _Clock()
    pending = _pending(clock)
    pending.add("r1", deadline_in_s=5.0)
    pending.not_sent("r1")
    assert not pending.any_due()
    clock.now += 60.0
    assert not pending.any_due()
    assert pending.lapsed_total == 0
    assert "r1" in pending  # a send that failed late may still have landed


def test_sending_lapses_the_overdue_even_if_nobody_asks() -> None:
    """A reader that never asks `any_due` (pacing unavailable) still lets requests lapse."""
    clock = _Clock()
    pending = _pending(clock)
    pending.add("old", deadline_in_s=1.0)
    clock.now += 20.0
    pending.add("new", deadline_in_s=1.0)
    assert pending.lapsed_total == 1


def test_answered_requests_do_not_pile_up_in_the_expiry_heap() -> None:
    clock = _Clock()
    pending = _pending(clock)
    for i in range(5000):
        pending.add(f"r{i}", deadline_in_s=None)
        pending.answered(f"r{i}")
    assert len(pending._expiry) <= 1024 + 2
    assert not pending.any_due()


@pytest.mark.parametrize(
    ("then", "urgent_due"),
    [
        pytest.param("nothing", True, id="urgent-while-its-result-is-due"),
        pytest.param("answered", False, id="answered"),
        pytest.param("not-sent", False, id="its-send-failed"),
        pytest.param("lapsed", False, id="past-deadline-and-grace"),
        pytest.param("sent-again-not-urgent", False, id="the-same-id-sent-again-not-urgent"),
    ],
)
def test_an_urgent_request_is_due_until_answered_or_lapsed(then: str, urgent_due: bool) -> None:
    clock = _Clock()
    pending = _pending(clock)
    pending.add("calm", deadline_in_s=None)
    pending.add("urgent", deadline_in_s=1.0, urgent=True)
    assert pending.any_urgent_due()
    if then == "answered":
        pending.answered("urgent")
    elif then == "not-sent":
        pending.not_sent("urgent")
    elif then == "lapsed":
        clock.now += 11.0
    elif then == "sent-again-not-urgent":
        pending.add("urgent", deadline_in_s=1.0)
    assert pending.any_urgent_due() is urgent_due
    assert pending.any_due()  # "calm" is still due in every case


def test_requests_that_are_not_urgent_are_never_urgent_due() -> None:
    pending = _pending(_Clock())
    pending.add("a", deadline_in_s=5.0)
    assert pending.any_due()
    assert not pending.any_urgent_due()

"""The checks several scenarios share, worded as the reports print them."""

from __future__ import annotations

import pytest

from services.chaos.ledger import Tally
from services.chaos.report import Check
from services.chaos.scenarios.checks import (
    answered_to_client,
    client_lost,
    client_view,
    first_ok_after,
    late_for_client,
    none_lost,
)
from services.chaos.traffic import TIMED_OUT


@pytest.mark.parametrize(
    ("total", "note", "expected"),
    [
        pytest.param(
            Tally(sent=10), None, Check("0 lost", True, "0 of 10 accepted lost"), id="none"
        ),
        pytest.param(
            Tally(sent=10, not_accepted=2, lost=1),
            None,
            Check("0 lost", False, "1 of 8 accepted lost"),
            id="one-of-accepted",
        ),
        pytest.param(
            Tally(sent=5, lost=2),
            "3 answered late",
            Check("0 lost", False, "2 of 5 accepted lost (3 answered late)"),
            id="with-note",
        ),
    ],
)
def test_none_lost(total: Tally, note: str | None, expected: Check) -> None:
    assert none_lost(total, note=note) == expected


@pytest.mark.parametrize(
    ("recover_s", "expected"),
    [
        pytest.param(None, "first ok for a request sent after the kill: never", id="never"),
        pytest.param(2.345, "first ok for a request sent after the kill: 2.3s after it", id="2.3s"),
    ],
)
def test_first_ok_after(recover_s: float | None, expected: str) -> None:
    assert first_ok_after("kill", recover_s) == expected


@pytest.mark.parametrize(
    ("lost", "seen", "expected"),
    [
        pytest.param(
            set(), {}, "of those, the client got a result for 0, timed out on 0", id="none-lost"
        ),
        pytest.param(
            {"a"}, {"a": "timeout", "b": "ok"},
            "of those, the client got a result for 0, timed out on 1", id="timed-out",
        ),
        pytest.param(
            {"a", "b"}, {"a": "ok", "b": "timeout"},
            "of those, the client got a result for 1 (ok), timed out on 1",
            id="observer-missed-one",
        ),
        pytest.param(
            {"a", "c"}, {"a": "deadline_exceeded"},
            "of those, the client got a result for 1 (deadline_exceeded), timed out on 0, "
            "has no word on 1",
            id="no-word",
        ),
    ],
)  # fmt: skip
def test_client_view(lost: set[str], seen: dict[str, str], expected: str) -> None:
    assert client_view(lost, seen) == expected


@pytest.mark.parametrize(
    ("lost", "seen", "unanswered", "read_by_client"),
    [
        pytest.param(set(), {}, set(), 0, id="none-lost"),
        pytest.param({"a"}, {"a": TIMED_OUT}, {"a"}, 0, id="timed-out-is-lost"),
        pytest.param({"a"}, {}, {"a"}, 0, id="no-word-is-lost"),
        pytest.param({"a", "b"}, {"a": "ok", "b": TIMED_OUT}, {"b"}, 1, id="read-is-not-lost"),
        pytest.param({"a"}, {"a": "deadline_exceeded"}, set(), 1, id="an-error-is-an-answer"),
    ],
)
def test_a_loss_the_client_read_is_the_brokers_not_a_lost_request(
    lost: set[str], seen: dict[str, str], unanswered: set[str], read_by_client: int
) -> None:
    assert client_lost(lost, seen) == unanswered
    check = answered_to_client(lost, seen)
    assert check.passed is (read_by_client == 0)
    assert check.detail.startswith(f"{read_by_client} result(s)")
    assert check.broker_defect is not None, "reported, not asserted"


@pytest.mark.parametrize(
    ("lost", "seen", "late"),
    [
        pytest.param(set(), {"a": "ok"}, 0, id="all-in-time"),
        pytest.param(set(), {"a": TIMED_OUT, "b": "ok"}, 1, id="answered-after-the-timeout"),
        pytest.param({"a"}, {"a": TIMED_OUT}, 0, id="lost-is-not-late"),
    ],
)
def test_an_answer_the_client_stopped_waiting_for_is_counted_late(
    lost: set[str], seen: dict[str, str], late: int
) -> None:
    check = late_for_client(lost, seen)

    assert check.passed is (late == 0)
    assert check.detail.startswith(f"{late} answered after the client's infer timed out")
    assert check.host_speed and not check.asserted, "reported, not asserted"

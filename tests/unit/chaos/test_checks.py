"""The checks several scenarios share, worded as the reports print them."""

from __future__ import annotations

import pytest

from services.chaos.ledger import Tally
from services.chaos.report import Check
from services.chaos.scenarios.checks import client_view, first_ok_after, none_lost


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

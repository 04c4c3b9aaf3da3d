"""Latency percentiles, time to recover and stalls over outcomes."""

from __future__ import annotations

import math

import pytest

from services.chaos.ledger import Seen, Sent, fates
from services.chaos.measures import (
    first_ok,
    first_ok_after,
    first_ok_sent_after,
    last_loss_sent_after,
    latencies_ms,
    lateness_s,
    max_gap_s,
    percentile,
)


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        pytest.param([], 99, None, id="empty"),
        pytest.param([5.0], 99, 5.0, id="one"),
        pytest.param([float(v) for v in range(1, 101)], 99, 99.0, id="nearest-rank-99"),
        pytest.param([float(v) for v in range(1, 101)], 50, 50.0, id="median"),
        pytest.param([3.0, 1.0, 2.0], 100, 3.0, id="max"),
        pytest.param([3.0, 1.0, 2.0], 0, 1.0, id="min"),
        pytest.param([1.0] * 99 + [math.inf], 99, 1.0, id="one-in-a-hundred-never"),
        pytest.param([1.0] * 98 + [math.inf] * 2, 99, math.inf, id="two-in-a-hundred-never"),
    ],
)
def test_percentile(values: list[float], q: float, expected: float | None) -> None:
    assert percentile(values, q) == expected


def test_percentile_refuses_out_of_range() -> None:
    with pytest.raises(ValueError, match="0-100"):
        percentile([1.0], 101)


def _sent(request_id: str, at: float) -> Sent:
    return Sent("valid", request_id, f"d-{request_id}", at, at + 10, True)


def test_latencies_count_anything_but_ok_as_never() -> None:
    items = fates(
        [_sent("a", 0.0), _sent("b", 0.0), _sent("c", 0.0)],
        [Seen("result", "a", "ok", 0.2), Seen("result", "b", "deadline_exceeded", 0.1)],
        grace_s=1.0,
    )
    assert latencies_ms(items) == [pytest.approx(200.0), math.inf, math.inf]


SEEN = [
    Seen("result", "a", "ok", 10.0, "worker-old"),
    Seen("result", "b", "rejected_overload", 12.0, None),
    Seen("dlq", "d", "unparseable", 13.0),
    Seen("result", "c", "ok", 15.0, "worker-old"),
    Seen("result", "e", "ok", 17.0, "worker-new"),
]


@pytest.mark.parametrize(
    ("after", "where", "expected"),
    [
        pytest.param(11.0, None, 4.0, id="first-ok-after"),
        pytest.param(10.0, None, 0.0, id="at-the-moment-counts"),
        pytest.param(11.0, "worker-new", 6.0, id="from-a-new-worker"),
        pytest.param(18.0, None, None, id="never"),
    ],
)
def test_first_ok_after(after: float, where: str | None, expected: float | None) -> None:
    chosen = None if where is None else (lambda s: s.worker_id == where)
    got = (
        first_ok_after(SEEN, after) if chosen is None else first_ok_after(SEEN, after, where=chosen)
    )
    assert got == expected


def test_first_ok_returns_the_record() -> None:
    found = first_ok(SEEN, 16.0)
    assert found is not None and found.worker_id == "worker-new"


def test_first_ok_sent_after_ignores_requests_sent_before() -> None:
    # "a" was sent before the fault and answered after it: it proves nothing.
    items = fates(
        [_sent("a", 1.0), _sent("b", 6.0), _sent("c", 7.0)],
        [
            Seen("result", "a", "ok", 6.5),
            Seen("result", "b", "invalid_input", 8.0),
            Seen("result", "c", "ok", 9.0),
        ],
        grace_s=1.0,
    )
    assert first_ok_sent_after(items, 5.0) == 4.0
    assert first_ok_sent_after(items, 8.0) is None


def test_last_loss_sent_after_is_the_latest_lost_send_after_the_time() -> None:
    items = fates(
        [_sent("a", 1.0), _sent("b", 6.0), _sent("c", 7.5), _sent("d", 8.0)],
        [Seen("result", "b", "ok", 6.5), Seen("result", "d", "ok", 8.5)],
        grace_s=1.0,
    )
    # "a" was lost but sent before; "c" is the last lost one sent after 5.0.
    assert last_loss_sent_after(items, 5.0) == 2.5
    assert last_loss_sent_after(items, 7.6) is None


@pytest.mark.parametrize(
    ("start", "end", "expected"),
    [
        pytest.param(0.0, 20.0, 10.0, id="before-the-first"),
        pytest.param(10.0, 20.0, 5.0, id="between"),
        pytest.param(10.0, 30.0, 13.0, id="after-the-last"),
        pytest.param(20.0, 25.0, 5.0, id="none-in-the-window"),
    ],
)
def test_max_gap(start: float, end: float, expected: float) -> None:
    assert max_gap_s(SEEN, start, end) == expected


def test_lateness_of_late_outcomes_only() -> None:
    items = fates(
        [_sent("a", 0.0), _sent("b", 0.0), _sent("c", 0.0)],
        [Seen("result", "a", "ok", 5.0), Seen("result", "b", "deadline_exceeded", 19.0)],
        grace_s=1.0,
    )
    assert lateness_s(items) == [9.0]

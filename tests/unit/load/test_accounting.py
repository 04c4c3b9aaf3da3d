"""The ledger and its summaries: every request sent is answered, an error, or lost."""

from __future__ import annotations

import numpy as np
import pytest

from services.load.ledger import NOT_SENT, Ledger, Sent
from services.load.summary import in_window, percentile, summarize
from services.load.timeline import backlog, backlog_peak, latency, rate


def ledger_of(*events: tuple[str, ...]) -> Ledger:
    """("send", id, t, deadline) / ("ok"|status, id, t, e2e) / ("fail", id, t)."""
    ledger = Ledger()
    for kind, request_id, t, *rest in events:
        if kind == "send":
            ledger.on_sent(Sent(request_id, "interactive", float(t), float(rest[0]), 16))
        elif kind == "fail":
            ledger.on_send_failed(request_id, "KafkaTimeoutError()", float(t))
        else:
            timings = {"e2e_ms": float(rest[0]), "queue_ms": 1.0, "batch_wait_ms": 2.0,
                       "preprocess_ms": 0.5, "infer_ms": 3.0, "postprocess_ms": 0.5}  # fmt: skip
            ledger.on_result(request_id, float(t), kind, timings, batch_size=4, message="why")
    return ledger


@pytest.mark.parametrize(
    ("events", "now", "lost", "settled"),
    [
        ([("send", "a", 0, 5), ("ok", "a", 1, 10)], 2, [], True),
        ([("send", "a", 0, 5)], 14, [], False),  # within deadline + grace (10 s)
        ([("send", "a", 0, 5)], 15.5, ["a"], True),
        ([("send", "a", 0, 5), ("deadline_exceeded", "a", 6, 6000)], 30, [], True),
        ([("send", "a", 0, 5), ("fail", "a", 0.1)], 0.2, [], True),
        ([("send", "a", 0, 5), ("send", "b", 1, 6), ("ok", "b", 2, 9)], 15.5, ["a"], True),
    ],
    ids=["answered", "still-in-time", "lost", "named-error", "not-sent", "one-of-two-lost"],
)
def test_lost_and_settled(
    events: list[tuple[str, ...]], now: float, lost: list[str], settled: bool
) -> None:
    ledger = ledger_of(*events)
    assert [s.request_id for s in ledger.lost(now, grace_s=10)] == lost
    assert ledger.settled(now, grace_s=10) is settled


@pytest.mark.parametrize(
    ("events", "now", "waiting", "lost"),
    [
        ([("send", "a", 0, 5)], 3, 1, 0),
        ([("send", "a", 0, 5)], 15.5, 0, 1),  # past deadline + grace: lost, not waiting
        ([("send", "a", 0, 5), ("send", "b", 10, 15), ("ok", "c", 11, 1)], 15.5, 1, 1),
        ([("send", "a", 0, 5), ("ok", "a", 1, 10)], 30, 0, 0),
    ],
    ids=["in-time", "lost", "one-of-each", "answered"],
)
def test_waiting_never_counts_the_lost(
    events: list[tuple[str, ...]], now: float, waiting: int, lost: int
) -> None:
    """The progress line once said `waiting 288 lost 288` of the same 288 requests."""
    ledger = ledger_of(*events)
    assert ledger.waiting(now, grace_s=10) == waiting
    assert len(ledger.lost(now, grace_s=10)) == lost


def test_repeats_and_foreign_results_do_not_count() -> None:
    ledger = ledger_of(("send", "a", 0, 5), ("ok", "a", 1, 10), ("ok", "a", 1.5, 10))
    assert ledger.duplicates == 1
    assert not ledger.on_result("someone-else", 1.0, "ok", {})
    assert ledger.answered["a"].t_s == 1
    assert ledger.outstanding() == 0


def test_summary_counts_statuses_lost_and_latency() -> None:
    ledger = ledger_of(
        ("send", "a", 0, 5), ("ok", "a", 0.1, 100),
        ("send", "b", 1, 6), ("ok", "b", 1.2, 300),
        ("send", "c", 2, 7), ("rejected_overload", "c", 2.01, 1),
        ("send", "d", 3, 8), ("fail", "d", 3.1),
        ("send", "e", 4, 9),  # never answered
        ("send", "f", 9, 29),  # not answered, but its deadline is ahead
    )  # fmt: skip
    s = summarize(ledger, ledger.of_tier("interactive"), slo_ms=200, now_s=20, grace_s=10)
    assert (s["sent"], s["ok"], s["lost"], s["unanswered_within_deadline"]) == (6, 2, 1, 1)
    assert s["errors"] == {NOT_SENT: 1, "rejected_overload": 1}
    assert s["e2e_ms"]["p50"] == 200.0
    assert s["roundtrip_ms"]["p50"] == pytest.approx(150.0)
    assert s["stages_ms"]["wait"] == {"p50": 3.0, "p99": 3.0}
    assert s["stages_ms"]["engine"] == {"p50": 4.0, "p99": 4.0}
    assert s["within_slo"] == round(1 / 6, 4)
    assert s["mean_batch_size"] == 4
    assert ledger.error_samples == {"rejected_overload": "why", NOT_SENT: "KafkaTimeoutError()"}
    assert [r.request_id for r in in_window(ledger.of_tier("interactive"), 1, 3)] == ["b", "c"]
    assert percentile([], 99) is None


def test_rates_latency_and_backlog_series() -> None:
    assert rate([0.1, 0.2, 1.5, 3.9], end_s=4, width_s=1).tolist() == [2, 1, 0, 1]
    starts, p50, p99 = latency([0.5, 1.0, 4.5], [10.0, 30.0, 50.0], end_s=6, width_s=2)
    assert starts.tolist() == [0, 2, 4]
    assert p50[0] == 20 and np.isnan(p50[1]) and p99[2] == 50
    at = np.array([0.0, 1.0, 2.0, 3.0])
    sent, done = np.array([0.0, 0.5, 1.0, 2.5]), np.array([0.9, 2.0, 3.0])
    assert backlog(sent, done, at).tolist() == [1, 2, 1, 1]


def _series(*values: float) -> tuple[np.ndarray, np.ndarray]:  # type: ignore[type-arg]
    return np.arange(len(values), dtype=float), np.array(values, dtype=float)


@pytest.mark.parametrize(
    ("values", "start", "end", "expected"),
    [
        ((0, 0, 5, 20, 40, 30, 10, 2, 0), 2, 8, (2.0, 40.0, 4.0, 5.0)),
        ((0, 0, 3, 4, 2, 0), 2, 5, None),  # never half a second of arrivals: no backlog
        ((0, 10, 30, 60, 60, 50), 1, 5, (2.0, 60.0, 3.0, None)),  # the first peak; not drained
        ((50, 0, 0), 1, 2, None),  # an earlier backlog is not this phase's
    ],
    ids=["grows-then-drains", "kept-up", "never-drained", "before-the-phase"],
)
def test_backlog_peak(
    values: tuple[float, ...], start: float, end: float, expected: tuple[float, ...] | None
) -> None:
    at, series = _series(*values)
    peak = backlog_peak(at, series, start_s=start, end_s=end, min_peak=10, drain_level=5)
    got = (
        None if peak is None else (peak.grew_for_s, peak.peak, peak.peak_at_s, peak.drained_after_s)
    )
    assert got == expected

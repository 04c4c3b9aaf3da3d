"""Accounting: each sent event's fate, and the counts over them."""

from __future__ import annotations

import pytest

from services.chaos.ledger import Fate, Seen, Sent, Tally, fates, outcomes_by, tally, tally_by

GRACE_S = 5.0


def sent(
    request_id: str | None = "r1",
    digest: str = "d1",
    *,
    at: float = 100.0,
    deadline: float = 130.0,
    accepted: bool = True,
    kind: str = "valid",
    phase: str = "main",
) -> Sent:
    return Sent(kind, request_id, digest, at, deadline, accepted, "interactive", phase)


def result(ref: str = "r1", status: str = "ok", at: float = 101.0) -> Seen:
    return Seen("result", ref, status, at)


def dead(ref: str = "d1", at: float = 101.0) -> Seen:
    return Seen("dlq", ref, "unparseable", at)


@pytest.mark.parametrize(
    ("event", "seen", "outcome", "repeats", "conflicts", "late"),
    [
        pytest.param(sent(), [result()], "ok", 0, 0, False, id="ok"),
        pytest.param(sent(), [result(status="invalid_input")], "invalid_input", 0, 0, False,
                     id="named-error"),
        pytest.param(sent(None), [dead()], "dlq", 0, 0, False, id="dlq-by-digest"),
        pytest.param(sent(), [dead()], "dlq", 0, 0, False, id="dlq-of-an-event-with-an-id"),
        pytest.param(sent(None), [result("d1")], "lost", 0, 0, False,
                     id="a-result-never-matches-a-digest"),
        pytest.param(sent(), [], "lost", 0, 0, False, id="nothing-came"),
        pytest.param(sent(accepted=False), [], "not_accepted", 0, 0, False,
                     id="unacked-and-unanswered-is-not-lost"),
        pytest.param(sent(accepted=False), [result()], "ok", 0, 0, False,
                     id="unacked-but-answered-counts"),
        pytest.param(sent(), [result(at=134.9)], "ok", 0, 0, False, id="within-the-grace"),
        pytest.param(sent(), [result(at=135.1)], "lost", 0, 0, True, id="after-the-grace-is-late"),
        pytest.param(sent(), [result(at=102.0), result(at=101.0)], "ok", 1, 0, False,
                     id="repeat"),
        pytest.param(sent(), [result(), result(status="deadline_exceeded", at=103.0)], "ok", 0, 1,
                     False, id="second-different-status-conflicts"),
        pytest.param(sent(), [dead(at=100.5), result(at=101.0)], "dlq", 0, 1, False,
                     id="dlq-and-result-conflict"),
        pytest.param(sent(), [result("r2")], "lost", 0, 0, False, id="another-request-s-result"),
    ],
)  # fmt: skip
def test_fate(
    event: Sent, seen: list[Seen], outcome: str, repeats: int, conflicts: int, late: bool
) -> None:
    [fate] = fates([event], seen, grace_s=GRACE_S)
    assert (fate.outcome, fate.repeats, fate.conflicts, fate.late) == (
        outcome,
        repeats,
        conflicts,
        late,
    )


def test_latency_is_from_send_to_the_first_outcome_in_time() -> None:
    [answered] = fates([sent()], [result(at=100.25), result(at=109.0)], grace_s=GRACE_S)
    [late] = fates([sent()], [result(at=200.0)], grace_s=GRACE_S)
    assert answered.latency_s == pytest.approx(0.25)
    assert late.latency_s is None


@pytest.mark.parametrize(
    "events",
    [
        pytest.param([sent("r1", "d1"), sent("r1", "d2")], id="request-id"),
        pytest.param([sent("r1", "d1"), sent("r2", "d1")], id="digest"),
    ],
)
def test_events_that_cannot_be_told_apart_are_refused(events: list[Sent]) -> None:
    with pytest.raises(ValueError, match="repeat among sent events"):
        fates(events, [], grace_s=GRACE_S)


def test_two_events_without_ids_are_told_apart_by_digest() -> None:
    items = fates([sent(None, "d1"), sent(None, "d2")], [dead("d2")], grace_s=GRACE_S)
    assert [f.outcome for f in items] == ["lost", "dlq"]


def test_tally_counts_every_outcome() -> None:
    events = [
        sent("a", "da"),
        sent("b", "db"),
        sent("c", "dc"),
        sent(None, "dd"),
        sent("e", "de"),
        sent("f", "df", accepted=False),
        sent("g", "dg"),
    ]
    seen = [
        result("a"),
        result("a", at=102.0),
        result("b", "rejected_overload"),
        result("c", "rejected_overload"),
        dead("dd"),
        result("g", at=500.0),
    ]
    assert tally(fates(events, seen, grace_s=GRACE_S)) == Tally(
        sent=7,
        not_accepted=1,
        ok=1,
        errors={"rejected_overload": 2},
        dlq=1,
        duplicates=1,
        conflicts=0,
        lost=2,
        late=1,
    )


def test_tally_accepted_and_answered() -> None:
    counts = Tally(sent=10, not_accepted=2, ok=3, errors={"invalid_input": 2}, dlq=1, lost=2)
    assert (counts.accepted, counts.answered) == (8, 6)


def test_tally_by_and_outcomes_by_group_fates() -> None:
    events = [
        sent("a", "da", phase="before"),
        sent("b", "db", phase="after"),
        sent("c", "dc", phase="after"),
    ]
    seen = [result("a"), result("b", "deadline_exceeded")]
    items: list[Fate] = fates(events, seen, grace_s=GRACE_S)
    by_phase = tally_by(items, lambda f: f.sent.phase)
    assert list(by_phase) == ["after", "before"]
    assert (by_phase["after"].lost, by_phase["after"].errors) == (1, {"deadline_exceeded": 1})
    assert outcomes_by(items, lambda f: f.sent.phase) == {
        "after": {"deadline_exceeded": 1, "lost": 1},
        "before": {"ok": 1},
    }

"""Which scaler acts: the lease log folded in order, and when to claim or stop acting."""

from __future__ import annotations

import json
from typing import Any

import pytest

from scaler.lease import (
    CLOCK_SKEW_S,
    FENCE_SHARE,
    RENEW_SHARE,
    LeaseKind,
    LeaseRecord,
    LeaseView,
    began_again,
    claimable,
    fenced,
    fold,
    reading_from,
    record_from_json,
    record_to_json,
)

LEASE_S = 10.0


def _r(kind: LeaseKind, holder: str, term: int) -> LeaseRecord:
    return LeaseRecord(kind, holder, term, LEASE_S, 1000.0 + term)


def _read(*records: LeaseRecord) -> LeaseView:
    """The view after reading `records` live, one a second from t = 1."""
    view = LeaseView()
    for t, record in enumerate(records, start=1):
        view = fold(view, record, heard_at=float(t))
    return view


@pytest.mark.parametrize(
    ("records", "holder", "term"),
    [
        pytest.param([], None, 0, id="an-empty-log"),
        pytest.param([_r("claim", "a", 1)], "a", 1, id="the-first-claim"),
        pytest.param(
            [_r("claim", "a", 1), _r("claim", "b", 1)], "a", 1, id="the-first-in-the-log-wins"
        ),
        pytest.param(
            [_r("claim", "a", 1), _r("claim", "b", 2)], "b", 2, id="the-next-term-takes-it"
        ),
        pytest.param(
            [_r("claim", "a", 1), _r("claim", "b", 3)], "a", 1, id="a-term-skipped-is-no-claim"
        ),
        pytest.param(
            [_r("claim", "a", 1), _r("claim", "b", 2), _r("renew", "a", 1)],
            "b",
            2,
            id="the-old-holder-s-late-renewal-changes-nothing",
        ),
        pytest.param(
            [_r("claim", "a", 1), _r("renew", "b", 1)], "a", 1, id="a-renewal-by-another-is-none"
        ),
        pytest.param(
            [_r("claim", "a", 1), _r("release", "a", 1)], None, 1, id="a-release-frees-it"
        ),
        pytest.param(
            [_r("claim", "a", 1), _r("release", "a", 1), _r("claim", "b", 2)],
            "b",
            2,
            id="after-a-release-the-next-term",
        ),
        pytest.param(
            [_r("claim", "a", 1), _r("release", "b", 1)], "a", 1, id="only-the-holder-releases"
        ),
        pytest.param(
            [_r("claim", "a", 1), _r("release", "a", 1), _r("renew", "a", 1)],
            None,
            1,
            id="no-renewal-after-its-own-release",
        ),
        pytest.param(
            [_r("claim", "b", 8), _r("renew", "a", 7)],
            "a",
            7,
            id="mid-log-a-renewal-names-the-holder-a-claim-never",
        ),
        pytest.param(
            [_r("claim", "b", 8), _r("renew", "a", 7), _r("renew", "b", 8)],
            "b",
            8,
            id="mid-log-a-newer-term-s-renewal-names-its-holder",
        ),
        pytest.param(
            [_r("claim", "a", 1), _r("release", "a", 1), _r("renew", "b", 2)],
            "b",
            2,
            id="a-newer-term-s-renewal-after-a-release",
        ),
        pytest.param(
            [_r("renew", "a", 7), _r("claim", "b", 8)], "b", 8, id="mid-log-then-the-next-term"
        ),
    ],
)
def test_the_log_s_order_names_the_holder(
    records: list[LeaseRecord], holder: str | None, term: int
) -> None:
    view = _read(*records)
    assert (view.holder, view.term) == (holder, term)


@pytest.mark.parametrize(
    ("start", "records", "holder", "term"),
    [
        pytest.param(0, [_r("claim", "b", 6)], "b", 6, id="a-log-begun-again-its-first-claim"),
        pytest.param(
            0,
            [_r("claim", "b", 6), _r("claim", "c", 6), _r("claim", "c", 7)],
            "c",
            7,
            id="then-the-next-term-as-ever",
        ),
        pytest.param(40, [_r("claim", "b", 6)], None, 0, id="mid-log-a-claim-names-none"),
    ],
)
def test_a_reader_from_the_log_s_first_record_takes_its_first_claim(
    start: int, records: list[LeaseRecord], holder: str | None, term: int
) -> None:
    view = reading_from(start)
    for record in records:
        view = fold(view, record, heard_at=1.0)
    assert (view.holder, view.term) == (holder, term)


def test_a_renewal_is_heard_when_it_is_read() -> None:
    view = _read(_r("claim", "a", 1), _r("renew", "a", 1), _r("renew", "a", 1))
    assert view.heard_at == 3.0
    past = fold(LeaseView(), _r("renew", "a", 1), heard_at=None)
    assert past.heard_at is None and past.written_at == 1001.0


def _live(heard_at: float) -> LeaseView:
    return LeaseView("a", 1, LEASE_S, heard_at, 1001.0)


def _past(written_at: float) -> LeaseView:
    return LeaseView("a", 1, LEASE_S, None, written_at)


WAIT_FOR_A_RENEWAL = LEASE_S * RENEW_SHARE + 1.01
OLD = 1000.0 - LEASE_S - CLOCK_SKEW_S


@pytest.mark.parametrize(
    ("view", "now", "wall_now", "claim"),
    [
        # Read from the log's past at t = 100 (caught up then).
        pytest.param(LeaseView(), 100.0, 1000.0, False, id="a-log-that-named-none-at-first"),
        pytest.param(
            LeaseView(), 100.0 + WAIT_FOR_A_RENEWAL, 1000.0, True, id="named-none-after-a-wait"
        ),
        pytest.param(LeaseView(term=3), 100.0, 1000.0, True, id="released-at-once"),
        pytest.param(_live(100.0), 100.0 + LEASE_S - 0.1, 1000.0, False, id="heard-within-lease"),
        pytest.param(_live(100.0), 100.0 + LEASE_S, 1000.0, True, id="silent-a-whole-lease"),
        pytest.param(_past(OLD), 100.0, 1000.0, False, id="past-old-but-no-wait-yet"),
        pytest.param(
            _past(OLD), 100.0 + WAIT_FOR_A_RENEWAL, 1000.0, True, id="past-old-and-no-renewal"
        ),
        pytest.param(
            _past(OLD + 0.5),
            100.0 + WAIT_FOR_A_RENEWAL,
            1000.0,
            False,
            id="past-within-the-clock-skew",
        ),
        pytest.param(
            _past(2000.0), 100.0 + LEASE_S - 0.1, 1000.0, False, id="past-from-a-clock-ahead"
        ),
        pytest.param(_past(2000.0), 100.0 + LEASE_S, 1000.0, True, id="past-a-whole-lease"),
    ],
)
def test_when_a_reader_may_claim(view: LeaseView, now: float, wall_now: float, claim: bool) -> None:
    got = claimable(view, now=now, wall_now=wall_now, caught_up_at=100.0, lease_s=LEASE_S)
    assert got is claim


@pytest.mark.parametrize(
    ("acked_sent_at", "now", "stop"),
    [
        pytest.param(None, 0.0, True, id="never-acknowledged"),
        pytest.param(100.0, 100.0 + FENCE_SHARE * LEASE_S - 0.1, False, id="within-the-fence"),
        pytest.param(100.0, 100.0 + FENCE_SHARE * LEASE_S, True, id="at-the-fence"),
    ],
)
def test_when_the_holder_stops_acting(acked_sent_at: float | None, now: float, stop: bool) -> None:
    assert fenced(acked_sent_at, now=now, lease_s=LEASE_S) is stop


@pytest.mark.parametrize("read_after_s", [0.0, 1.0, (1 - FENCE_SHARE) * LEASE_S - 0.01])
def test_the_holder_stops_before_any_reader_may_claim(read_after_s: float) -> None:
    """A renewal sent at 0 and read by a standby `read_after_s` later: the holder, unable
    to renew again, has stopped by the time the standby may claim, with the fence's margin
    to spare for the standby's fetch."""
    claim_at = read_after_s + LEASE_S
    assert not claimable(
        _live(read_after_s), now=claim_at - 0.01, wall_now=0.0, caught_up_at=0.0, lease_s=LEASE_S
    )
    assert claimable(
        _live(read_after_s), now=claim_at, wall_now=0.0, caught_up_at=0.0, lease_s=LEASE_S
    )
    assert fenced(0.0, now=FENCE_SHARE * LEASE_S, lease_s=LEASE_S)


def test_one_renewal_lost_does_not_stop_the_holder() -> None:
    """Renewals at 0, 1/4 and 1/2 of the lease: the one at 1/4 lost, the holder still acts
    when the one at 1/2 is read back, with time to spare for reading it."""
    next_read_back = 2 * RENEW_SHARE * LEASE_S
    assert not fenced(0.0, now=next_read_back + 0.1 * LEASE_S, lease_s=LEASE_S)


def test_a_log_begun_again_keeps_the_holder_known_for_a_whole_lease() -> None:
    """The broker lost its logs: the holder a reader knew stays, heard now, so none claims
    at once on the empty log; its renewal of the same term on the new log is heard."""
    view = began_again(_live(100.0), now=200.0)
    assert (view.holder, view.term, view.heard_at, view.from_start) == ("a", 1, 200.0, True)
    assert not claimable(
        view, now=200.0 + LEASE_S - 0.1, wall_now=0.0, caught_up_at=0.0, lease_s=LEASE_S
    )
    assert fold(view, _r("renew", "a", 1), heard_at=205.0).heard_at == 205.0
    assert (fold(view, _r("claim", "b", 2), heard_at=205.0).holder) == "b"
    released = began_again(LeaseView(term=4), now=200.0)
    assert released.heard_at is None and released.term == 4


def test_a_record_survives_its_json() -> None:
    record = LeaseRecord("renew", "scaler-h-7", 12, 10.0, 1765000000.25)
    assert record_from_json(record_to_json(record)) == record


GOOD: dict[str, Any] = {
    "schema_version": 1,
    "kind": "claim",
    "holder": "a",
    "term": 1,
    "lease_s": 10.0,
    "written_at": 1.0,
}


@pytest.mark.parametrize(
    ("value", "why"),
    [
        pytest.param(b"{", "not JSON", id="not-json"),
        pytest.param(None, "not a lease record", id="no-value"),
        pytest.param(b"[]", "not a lease record", id="a-list"),
        pytest.param({**GOOD, "extra": 1}, "not a lease record", id="a-field-more"),
        pytest.param({**GOOD, "schema_version": 2}, "not a lease record", id="another-version"),
        pytest.param({**GOOD, "kind": "steal"}, "unknown kind 'steal'", id="unknown-kind"),
        pytest.param({**GOOD, "holder": ""}, "no holder", id="empty-holder"),
        pytest.param({**GOOD, "term": 0}, "a term that is not a count", id="term-0"),
        pytest.param({**GOOD, "term": True}, "a term that is not a count", id="term-bool"),
        pytest.param({**GOOD, "term": 1.5}, "a term that is not a count", id="term-float"),
        pytest.param({**GOOD, "lease_s": 0}, "a lease above 0", id="lease-0"),
        pytest.param({**GOOD, "written_at": "x"}, "not a finite number", id="time-string"),
        pytest.param(
            b'{"schema_version":1,"kind":"claim","holder":"a","term":1,"lease_s":1'
            + b"0" * 400
            + b',"written_at":1}',
            "not a finite number",
            id="an-int-past-a-float",
        ),
        pytest.param(b'{"lease_s": NaN}', "not a lease record", id="nan"),
        pytest.param(b"[" * 100_000 + b"]" * 100_000, "not JSON", id="nested-past-the-stack"),
    ],
)
def test_a_value_that_is_no_lease_record_says_why(value: Any, why: str) -> None:
    raw = value if isinstance(value, bytes | None) else json.dumps(value).encode()
    got = record_from_json(raw)
    assert isinstance(got, str) and why in got

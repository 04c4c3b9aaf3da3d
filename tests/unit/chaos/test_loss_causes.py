"""The broker-restart scenario sorts its plain producer's losses by what the ingest topic
shows of each: never readable, readable only at an offset shared with another record
(both the broker's), or readable alone (inferbus's)."""

from __future__ import annotations

import pytest

from infra.scan import LogScan
from services.chaos.ledger import Tally
from services.chaos.scenarios.broker_restart import (
    LossCauses,
    loss_causes,
    loss_detail,
    resume_unseen_by_broker,
    served_not_refused,
)

SCAN = LogScan(
    found={"gone": [], "twin": [(0, 4)], "alone": [(1, 7)], "both": [(0, 4), (2, 9)]},
    shared=frozenset({(0, 4)}),
)


@pytest.mark.parametrize(
    ("lost", "never", "shadowed", "ours"),
    [
        pytest.param(set(), set(), set(), set(), id="none"),
        pytest.param({"gone"}, {"gone"}, set(), set(), id="phantom-ack"),
        pytest.param({"twin"}, set(), {"twin"}, set(), id="shadowed-by-a-twin"),
        pytest.param({"alone"}, set(), set(), {"alone"}, id="readable-alone-is-ours"),
        pytest.param({"both"}, set(), set(), {"both"}, id="one-copy-alone-is-ours"),
        pytest.param({"unscanned"}, {"unscanned"}, set(), set(), id="not-asked-is-never-seen"),
    ],
)
def test_loss_causes(lost: set[str], never: set[str], shadowed: set[str], ours: set[str]) -> None:
    assert loss_causes(lost, SCAN) == LossCauses(
        frozenset(never), frozenset(shadowed), frozenset(ours)
    )


@pytest.mark.parametrize(
    ("causes", "last_loss_s", "expected"),
    [
        pytest.param(LossCauses(frozenset(), frozenset(), frozenset()), None, "none lost"),
        pytest.param(
            LossCauses(frozenset({"a"}), frozenset({"b", "c"}), frozenset()),
            1.5,
            "3 lost: 1 never readable on the ingest topic, 2 at an offset the broker gave "
            "another record too, 0 readable alone; last sent 1.5 s after the return",
        ),
        pytest.param(
            LossCauses(frozenset(), frozenset(), frozenset({"r2", "r1"})),
            None,
            "2 lost: 0 never readable on the ingest topic, 0 at an offset the broker gave "
            "another record too, 2 readable alone (r1, r2)",
        ),
    ],
)
def test_loss_detail(causes: LossCauses, last_loss_s: float | None, expected: str) -> None:
    assert loss_detail(causes, last_loss_s) == expected


@pytest.mark.parametrize(
    ("errors", "passed", "detail"),
    [
        pytest.param({}, True, "0 of 360 rejected_overload", id="all-served"),
        pytest.param(
            {"rejected_overload": 65, "deadline_exceeded": 2},
            False,
            "65 of 360 rejected_overload",
            id="refused-at-the-rejoin",
        ),
    ],
)
def test_served_not_refused(errors: dict[str, int], passed: bool, detail: str) -> None:
    check = served_not_refused(Tally(sent=360, errors=errors))
    assert (check.passed, check.detail, check.asserted) == (passed, detail, False)


BROKERS = LossCauses(frozenset({"a"}), frozenset({"b"}), frozenset())
OURS = LossCauses(frozenset(), frozenset(), frozenset({"a"}))


@pytest.mark.parametrize(
    ("via_client", "recover", "after", "causes", "brokers"),
    [
        pytest.param(False, None, Tally(sent=2, lost=2), BROKERS, True, id="all-lost-by-broker"),
        pytest.param(False, None, Tally(sent=2, lost=2), OURS, False, id="one-readable-alone"),
        pytest.param(False, None, Tally(sent=2, lost=1), BROKERS, False, id="one-not-lost"),
        pytest.param(False, 3.0, Tally(sent=2, lost=2), BROKERS, False, id="resumed"),
        pytest.param(False, None, Tally(sent=0), BROKERS, False, id="none-sent-after"),
        pytest.param(True, None, Tally(sent=2, lost=2), BROKERS, False, id="client-resends"),
    ],
)
def test_never_resumed_is_the_brokers_only_when_it_lost_everything_sent_after(
    via_client: bool, recover: float | None, after: Tally, causes: LossCauses, brokers: bool
) -> None:
    assert resume_unseen_by_broker(via_client, recover, after, causes) is brokers

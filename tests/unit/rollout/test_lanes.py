"""How the scaler sizes canary groups: bounds by share, drain then retire once it has none."""

from __future__ import annotations

import pytest

from infra.models.config import ReplicaBounds
from scaler.decision import GroupDecision
from scaler.rollout.lanes import lane_bounds, settle_canary
from scaler.signals import GroupSignals

BOUNDS = ReplicaBounds(min=0, max=8, warm=2)
GROUP = "inferbus.workers.m.canary.interactive"


@pytest.mark.parametrize(
    ("lane", "share", "expected"),
    [
        pytest.param("stable", 0.0, (0, 8, 2), id="stable-as-yaml"),
        pytest.param("stable", 0.5, (0, 8, 2), id="stable-ignores-share"),
        pytest.param("canary", 0.1, (1, 8, 2), id="canary-keeps-one"),
        pytest.param("canary", 0.0, (0, 8, 0), id="canary-without-share"),
    ],
)
def test_lane_bounds(lane: str, share: float, expected: tuple[int, int, int]) -> None:
    assert lane_bounds(BOUNDS, lane, share) == expected  # type: ignore[arg-type]


def decision(desired: int, standby: int = 0, current: int = 2) -> GroupDecision:
    return GroupDecision(
        group=GROUP,
        model="m",
        tier="interactive",
        current=current,
        desired=desired,
        diagnosis="steady",
        standby=standby,
    )


def signals(lag: int | None, *, stale: bool = False) -> GroupSignals:
    return GroupSignals(
        group=GROUP,
        model="m",
        tier="interactive",
        replicas=2,
        ready_replicas=2,
        partitions=12,
        slo_p99_e2e_ms=500,
        collected_at=0.0,
        lag=lag,
        stale=stale,
        min_replicas=0,
    )


LATE = 60.0
"""Seconds without a share: past the grace."""

CASES = [
    pytest.param("canary", 0.1, signals(0), decision(2), (2, 0, None), id="has-share"),
    pytest.param("stable", 0.0, signals(0), decision(2), (2, 0, None), id="stable-untouched"),
    pytest.param("canary", 0.0, signals(0), decision(2, 1), (0, 0, "canary_retired"), id="retired"),
    pytest.param("canary", 0.0, signals(0), decision(0), (0, 0, None), id="already-none"),
    pytest.param(
        "canary", 0.0, signals(40), decision(0), (1, 0, "canary_draining"), id="drains-first"
    ),
    pytest.param("canary", 0.0, signals(40), decision(3), (3, 0, None), id="draining-enough"),
    pytest.param(
        "canary", 0.0, signals(0, stale=True), decision(0), (1, 0, "canary_draining"), id="stale"
    ),
    pytest.param("canary", 0.0, None, decision(0), (1, 0, "canary_draining"), id="no-signals"),
]


@pytest.mark.parametrize(("lane", "share", "signals_", "before", "expected"), CASES)
def test_settle_canary(
    lane: str,
    share: float,
    signals_: GroupSignals | None,
    before: GroupDecision,
    expected: tuple[int, int, str | None],
) -> None:
    after = settle_canary(before, signals_, lane, share, no_share_for_s=LATE)  # type: ignore[arg-type]
    added = after.reasons[len(before.reasons) :]
    assert (after.desired, after.standby, added[0].code if added else None) == expected


@pytest.mark.parametrize(
    ("before", "no_share_for_s", "expected"),
    [
        pytest.param(decision(0), 3.0, (1, "canary_grace"), id="within-grace-keeps-one"),
        pytest.param(decision(2), 3.0, (2, None), id="within-grace-as-decided"),
        pytest.param(decision(0, current=0), 3.0, (0, None), id="none-running-stays-none"),
        pytest.param(decision(0), 15.0, (0, None), id="grace-over"),
    ],
)
def test_a_drained_canary_keeps_a_worker_while_ingest_may_still_route_to_it(
    before: GroupDecision, no_share_for_s: float, expected: tuple[int, str | None]
) -> None:
    after = settle_canary(
        before, signals(0), "canary", 0.0, no_share_for_s=no_share_for_s, grace_s=15.0
    )
    added = after.reasons[len(before.reasons) :]
    assert (after.desired, added[0].code if added else None) == expected

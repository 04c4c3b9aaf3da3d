"""Which decisions are written: every tick's, except an idle group's unchanged hold."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from scaler.actuators.decisions import Written, is_idle, what_it_says, worth_writing
from scaler.decision import GroupDecision, Reason
from scaler.signals import GroupSignals

GROUP = "inferbus.workers.demo_mlp.interactive"

IDLE = GroupSignals(
    group=GROUP, model="demo_mlp", tier="interactive", replicas=1, ready_replicas=1,
    partitions=12, slo_p99_e2e_ms=500, collected_at=1.0, arrival_rps=0.0, lag=0,
)  # fmt: skip

HOLD = GroupDecision(
    group=GROUP, model="demo_mlp", tier="interactive", current=1, desired=1, diagnosis="idle"
)


def said(decision: GroupDecision = HOLD, **overrides: Any) -> tuple[object, ...]:
    options: dict[str, Any] = {"applied": False, "error": None, "acting": True, **overrides}
    return what_it_says(decision, **options)


@pytest.mark.parametrize(
    ("signals", "idle"),
    [
        pytest.param(IDLE, True, id="no-arrivals-no-lag"),
        pytest.param(replace(IDLE, arrival_rps=0.4), False, id="a-trickle"),
        pytest.param(replace(IDLE, lag=3), False, id="queued"),
        pytest.param(replace(IDLE, lag=None), False, id="lag-unknown"),
        pytest.param(replace(IDLE, arrival_rps=None), False, id="rate-unknown"),
        pytest.param(replace(IDLE, stale=True), False, id="stale"),
        pytest.param(None, False, id="no-signals"),
    ],
)
def test_is_idle(signals: GroupSignals | None, idle: bool) -> None:
    assert is_idle(signals) is idle


@pytest.mark.parametrize(
    ("now_said", "signals", "last", "now", "written"),
    [
        pytest.param(said(), IDLE, None, 100.0, True, id="first-record"),
        pytest.param(
            said(), IDLE, Written(said(), 90.0, replace(IDLE, collected_at=-9.0)), 100.0, False,
            id="idle-hold-again",
        ),
        pytest.param(said(), IDLE, Written(said(), 75.0, IDLE), 100.0, True, id="idle-hold-due"),
        pytest.param(
            said(), IDLE, Written(said(), 99.0, replace(IDLE, arrival_rps=3.0, lag=2)), 100.0,
            True, id="the-first-idle-hold-after-traffic",
        ),
        pytest.param(
            said(), IDLE, Written(said(), 99.0, replace(IDLE, queue_p99_ms=120.0)), 100.0, True,
            id="the-window-still-holds-latencies",
        ),
        pytest.param(said(), IDLE, Written(said(), 99.0), 100.0, True, id="signals-unknown"),
        pytest.param(
            said(replace(HOLD, desired=2, diagnosis="capacity_bound")), IDLE,
            Written(said(), 99.0), 100.0, True, id="a-change",
        ),
        pytest.param(said(applied=True), IDLE, Written(said(), 99.0), 100.0, True, id="applied"),
        pytest.param(
            said(error="boom"), IDLE, Written(said(), 99.0), 100.0, True, id="an-error"
        ),
        pytest.param(
            said(replace(HOLD, standby=1)), IDLE, Written(said(), 99.0), 100.0, True,
            id="standby-changes",
        ),
        pytest.param(
            said(), replace(IDLE, arrival_rps=5.0), Written(said(), 99.0), 100.0, True,
            id="hold-with-traffic",
        ),
    ],
)  # fmt: skip
def test_worth_writing(
    now_said: tuple[object, ...],
    signals: GroupSignals | None,
    last: Written | None,
    now: float,
    written: bool,
) -> None:
    assert worth_writing(now_said, signals, last, now=now, idle_every_s=25.0) is written


def test_every_tick_when_turned_off() -> None:
    last = Written(said(), 99.9, IDLE)
    assert worth_writing(said(), IDLE, last, now=100.0, idle_every_s=0.0)


def test_reasons_numbers_are_not_news() -> None:
    """The reasons' numbers move every tick; an idle hold says the same whatever they are."""
    moved = replace(HOLD, reasons=(Reason("idle", "no arrivals for 41 s", {"quiet_s": 41}),))
    assert said(moved) == said()

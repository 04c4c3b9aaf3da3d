"""Rebalance-aware steps of the SLO policy, tick by tick with a fake clock."""

from __future__ import annotations

import dataclasses

import pytest

from scaler.config import PolicyConfig
from scaler.decision import GroupDecision
from scaler.policy import decide
from scaler.policy.rebalance import queue_budget_ms
from scaler.signals import GroupSignals, ScalerState
from tests.unit.scaler.conftest import FakeClock, make_signals


def _run(
    clock: FakeClock,
    ticks: list[tuple[float, GroupSignals]],
    config: PolicyConfig,
) -> list[tuple[float, GroupDecision]]:
    """Feed (seconds to wait, signals) ticks; returns (time, decision) per tick."""
    state, out = ScalerState(), []
    for wait, s in ticks:
        now = clock.tick(wait)
        decision, state = decide([dataclasses.replace(s, collected_at=now)], state, config, now)
        out.append((now, decision.groups[0]))
    return out


SPARE_1 = PolicyConfig(initial_spare_replicas=1.0, busiest_max_utilization=None)
"""Size as busy + 1 spare replica for the mean, so that the numbers below are easy to follow
(the busiest member's share is tested in test_shares.py)."""


@pytest.mark.parametrize(
    ("overrides", "share", "desired", "code"),
    [
        # 2900/s at 300/s: 9.7 busy -> 13 (80 % ceiling); 12 + a quarter of 12 = 15.
        pytest.param(
            {"replicas": 12, "ready_replicas": 12, "arrival_rps": 2900.0, "partitions": 32},
            0.25,
            15,
            "scale_up_step",
            id="one-more-rounded-to-a-quarter",
        ),
        pytest.param(
            {"replicas": 12, "ready_replicas": 12, "arrival_rps": 2900.0, "partitions": 32},
            0.0,
            13,
            "arrival",
            id="default-exactly-what-is-needed",
        ),
        pytest.param(
            {"replicas": 2, "ready_replicas": 2, "arrival_rps": 520.0},
            0.25,
            3,
            "arrival",
            id="small-group-steps-by-one",
        ),
        pytest.param(
            {"replicas": 4, "ready_replicas": 4, "arrival_rps": 2520.0, "partitions": 32},
            0.25,
            11,
            "arrival",
            id="big-step-unchanged",
        ),
    ],
)
def test_scale_up_step(overrides: dict[str, object], share: float, desired: int, code: str) -> None:
    config = dataclasses.replace(SPARE_1, scale_up_min_step_share=share)
    decision, _ = decide([make_signals(**overrides)], ScalerState(), config, 0.0)
    (g,) = decision.groups
    assert g.desired == desired and code in {r.code for r in g.reasons}, g.line()


@pytest.mark.parametrize(
    ("engine_ms", "queue_ms", "e2e_ms", "budget_ms"),
    [
        # flash-crowd-s1 x30 at 110/s: the slowest requests met 135 ms besides their wait,
        # not the engine's p99 of 213 ms.
        pytest.param(213.0, 217.0, 352.0, 365.0, id="the-e2e-p99-less-its-queue-wait"),
        pytest.param(150.0, 700.0, 850.0, 350.0, id="when-the-p99s-add-the-engine-p99"),
        # 600 ms besides the wait, 150 of them the engine's: the rest came before the queue
        # (ingest, the broker, a client's clock), and no replica shrinks it.
        pytest.param(150.0, 300.0, 900.0, 350.0, id="at-most-the-engine-p99"),
        pytest.param(None, 300.0, 450.0, 350.0, id="no-engine-p99-the-e2e-less-the-queue"),
        pytest.param(150.0, 20.0, None, 350.0, id="no-e2e-p99-the-engine-p99"),
        pytest.param(150.0, None, 700.0, 350.0, id="no-queue-p99-the-engine-p99"),
        pytest.param(None, None, None, 500.0, id="nothing-measured-the-whole-slo"),
        pytest.param(480.0, 10.0, 600.0, 50.0, id="never-under-a-tenth-of-the-slo"),
        # e2e under queue p99 cannot be one request's: the two readings disagree, and the
        # engine's p99 is what is left to go on.
        pytest.param(150.0, 300.0, 250.0, 350.0, id="an-e2e-under-the-queue-the-engine-p99"),
    ],
)
def test_queue_budget(
    engine_ms: float | None, queue_ms: float | None, e2e_ms: float | None, budget_ms: float
) -> None:
    s = make_signals(
        slo_p99_e2e_ms=500.0, engine_p99_ms=engine_ms, queue_p99_ms=queue_ms, e2e_p99_ms=e2e_ms
    )
    assert queue_budget_ms(s) == pytest.approx(budget_ms)


def test_backlog_projects_growth_until_ready() -> None:
    # 4 ready at 300/s cannot take 1500/s: 300/s more lag for 40 s before anyone helps.
    # The SLO allows a lag of 1500/s x 0.35 s: the queue budget is the SLO's 500 ms less the
    # 150 ms of the e2e p99 that is not queue wait.
    s = make_signals(
        arrival_rps=1500.0, lag=3000, oldest_age_ms=2000.0, partitions=64, e2e_p99_ms=170.0
    )
    (g,) = decide([s], ScalerState(), SPARE_1, 0.0)[0].groups
    reason = next(r for r in g.reasons if r.code == "backlog")
    assert reason.numbers["projected_excess"] == pytest.approx(3000 - 1500 * 0.35 + 300 * 40)
    assert g.desired == 12  # 5 busy / 0.8 -> 7, + ceil(14475 / (300 * 10)) = 5


@pytest.mark.parametrize(
    ("lag", "oldest_age_ms", "backlog"),
    [
        pytest.param(1, 3.0, False, id="one-request-in-flight"),
        pytest.param(40, 3.0, False, id="young-and-cleared-within-the-budget"),
        pytest.param(1, None, True, id="age-unknown-counts-as-late"),
        pytest.param(1, 800.0, True, id="older-than-the-budget"),
        pytest.param(500, 3.0, True, id="more-than-the-ready-replicas-clear-in-the-budget"),
    ],
)
def test_a_trickles_lag_is_late_only_when_old_or_more_than_ready_replicas_clear(
    lag: int, oldest_age_ms: float | None, backlog: bool
) -> None:
    # 0.3/s: Little's law allows 0.3 x 0.35 s = 0.1 requests; one replica clears 105 in 0.35 s
    # (the SLO's 500 ms less the 150 ms of the e2e p99 that is not queue wait).
    s = make_signals(
        replicas=1,
        ready_replicas=1,
        arrival_rps=0.3,
        lag=lag,
        oldest_age_ms=oldest_age_ms,
        e2e_p99_ms=170.0,
    )
    (g,) = decide([s], ScalerState(), SPARE_1, 0.0)[0].groups
    assert ("backlog" in {r.code for r in g.reasons}) is backlog, g.line()


def _steady(replicas: int, rps: float) -> GroupSignals:
    return make_signals(
        replicas=replicas,
        ready_replicas=replicas,
        arrival_rps=rps,
        utilization=min(1.0, rps / (300.0 * replicas)),
        partitions=64,
    )


def test_scale_down_goes_to_the_highest_recommendation_of_the_hold(clock: FakeClock) -> None:
    # 70 s at 12 replicas on 2400/s (8 busy + 1 -> 10, held within one... then the load
    # eases to 1800/s (6 busy -> 8) in small steps: never a step, so the short hold applies.
    config = dataclasses.replace(SPARE_1, scale_down_hold_s=20.0)
    ticks = [(5.0, _steady(12, 2400.0))] * 14
    ticks += [(5.0, _steady(12, rps)) for rps in (2300.0, 2200.0, 2100.0, 2000.0, 1900.0)]
    ticks += [(5.0, _steady(12, 1800.0))] * 12
    seen = _run(clock, ticks, config)
    downs = [(t, g) for t, g in seen if g.desired < 12]
    assert downs, [g.line() for _, g in seen]
    t, first = downs[0]
    # The first scale-down lands on the highest recommendation of the last 20 s, not lower.
    assert first.desired >= 8
    assert all(g.desired >= first.desired for u, g in seen if u < t + 20)


def test_step_down_holds_for_two_keep_costs(clock: FakeClock) -> None:
    # A burst of 3000/s, then arrivals drop to 300/s at once: a gap may end in a burst,
    # so the pre-drop size is held 2 x (40 s time-to-ready + 1 s handover) = 82 s.
    ticks = [(5.0, _steady(12, 3000.0))] * 14 + [(5.0, _steady(12, 300.0))] * 30
    seen = _run(clock, ticks, SPARE_1)
    drop_at = 14 * 5.0
    first_down = next(t for t, g in seen if g.desired < 12)
    assert first_down - drop_at >= 80
    held = next(g for t, g in seen if t == drop_at + 40)
    assert "after a step down in arrivals" in held.line()


def test_one_replica_surplus_is_kept(clock: FakeClock) -> None:
    # 2.8 busy + 1 spare -> 4; five replicas is within one: not worth a handover.
    seen = _run(clock, [(5.0, _steady(5, 840.0))] * 40, SPARE_1)
    assert all(g.desired == 5 for _, g in seen)
    assert "within_band" in {r.code for r in seen[-1][1].reasons}


def test_no_scale_down_while_arrivals_rise(clock: FakeClock) -> None:
    # Plenty of replicas, but arrivals climb 5/s every tick: no scale-down meanwhile.
    ticks = [(5.0, _steady(20, 600.0 + 25.0 * i)) for i in range(30)]
    seen = _run(clock, ticks, SPARE_1)
    assert all(g.desired >= 20 for _, g in seen)
    assert any("not_while_rising" in {r.code for r in g.reasons} for _, g in seen)


@pytest.mark.parametrize(
    ("needed_rps", "share", "expected"),
    [
        # 20 replicas, 3590/s = 12 busy + 1 -> 15 (ceiling 12 / 0.8 -> 15).
        pytest.param(3590.0, 0.3, {20}, id="drop-of-5-of-20-skipped-at-30pct"),
        pytest.param(3590.0, 0.2, {20, 15}, id="drop-of-5-of-20-taken-at-20pct"),
        pytest.param(3590.0, 0.0, {20, 15}, id="no-minimum-step"),
    ],
)
def test_scale_down_minimum_step(
    clock: FakeClock, needed_rps: float, share: float, expected: set[int]
) -> None:
    cfg = dataclasses.replace(SPARE_1, scale_down_min_step_share=share)
    seen = _run(clock, [(5.0, _steady(20, needed_rps))] * 40, cfg)
    assert {g.desired for _, g in seen} == expected


def _scaled_down_then(
    clock: FakeClock, config: PolicyConfig, after_s: float, lag: int
) -> GroupDecision:
    """8 replicas idle long enough to scale down, then the tick `after_s` later."""
    idle = make_signals(replicas=8, ready_replicas=8, arrival_rps=300.0, lag=0, utilization=0.1)
    state, now = ScalerState(), 0.0
    down_at = None
    for _ in range(400):
        now = clock.tick(2.0)
        decision, state = decide([dataclasses.replace(idle, collected_at=now)], state, config, now)
        if decision.groups[0].desired < 8:
            down_at = now
            break
    assert down_at is not None, "the idle group never scaled down"
    smaller = decision.groups[0].desired
    now = clock.tick(after_s)
    after = make_signals(
        replicas=smaller,
        ready_replicas=smaller,
        arrival_rps=300.0,
        lag=lag,
        oldest_age_ms=3000.0,
        queue_p99_ms=3000.0,
        collected_at=now,
    )
    decision, _ = decide([after], state, config, now)
    return decision.groups[0]


@pytest.mark.parametrize(
    ("after_s", "lag", "settles"),
    [
        # 300/s: a 15 s settle explains up to 300 × 15.5 ≈ 4650 requests of lag.
        pytest.param(4.0, 1500, True, id="pause-lag-after-scale-down-holds"),
        pytest.param(30.0, 1500, False, id="after-settling-backlog-counts-again"),
        pytest.param(4.0, 40_000, False, id="lag-beyond-any-pause-still-scales"),
    ],
)
def test_rebalance_settle_after_scale_down(
    clock: FakeClock, after_s: float, lag: int, settles: bool
) -> None:
    config = PolicyConfig(rebalance_settle_s=15.0, scale_down_window_s=30.0)
    last = _scaled_down_then(clock, config, after_s, lag)
    codes = [r.code for r in last.reasons]
    assert ("settling" in codes) == settles, (codes, last.line())
    if settles:
        assert last.desired == last.current, last.line()
    else:
        assert last.desired > last.current, last.line()


def test_settle_off_when_configured_zero(clock: FakeClock) -> None:
    config = PolicyConfig(rebalance_settle_s=0.0, scale_down_window_s=30.0)
    last = _scaled_down_then(clock, config, 4.0, 1500)
    assert "settling" not in [r.code for r in last.reasons]

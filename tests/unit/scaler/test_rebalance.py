"""Rebalance-aware steps of the SLO policy, tick by tick with a fake clock."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from scaler.policy import decide
from scaler.signals import GroupDecision, GroupSignals, PolicyConfig, ScalerState
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


@pytest.mark.parametrize(
    ("overrides", "desired", "code"),
    [
        pytest.param(
            {"replicas": 12, "ready_replicas": 12, "arrival_rps": 2900.0, "partitions": 32},
            15,
            "scale_up_step",
            id="one-more-rounded-to-a-quarter",
        ),
        pytest.param(
            {"replicas": 2, "ready_replicas": 2, "arrival_rps": 520.0},
            3,
            "arrival",
            id="small-group-steps-by-one",
        ),
        pytest.param(
            {"replicas": 4, "ready_replicas": 4, "arrival_rps": 2520.0, "partitions": 32},
            12,
            "arrival",
            id="big-step-unchanged",
        ),
    ],
)
def test_scale_up_step(overrides: dict[str, object], desired: int, code: str) -> None:
    decision, _ = decide([make_signals(**overrides)], ScalerState(), PolicyConfig(), 0.0)
    (g,) = decision.groups
    assert g.desired == desired and code in {r.code for r in g.reasons}


def test_backlog_projects_growth_until_ready() -> None:
    # 4 ready at 300/s cannot take 1500/s: 300/s more lag for 40 s before anyone helps.
    s = make_signals(arrival_rps=1500.0, lag=3000, oldest_age_ms=2000.0, partitions=64)
    (g,) = decide([s], ScalerState(), PolicyConfig(), 0.0)[0].groups
    reason = next(r for r in g.reasons if r.code == "backlog")
    assert reason.numbers["projected_excess"] == pytest.approx(3000 - 1500 * 0.35 + 300 * 40)
    assert g.desired == 12  # ceil(1500 / 210 + 14475 / (300 * 10))


def _burst_then_quiet(
    replicas: int, quiet_rps: float, ticks: int
) -> list[tuple[float, GroupSignals]]:
    busy = make_signals(arrival_rps=300.0 * 0.7 * replicas, partitions=64)
    quiet = make_signals(
        replicas=replicas,
        ready_replicas=replicas,
        arrival_rps=quiet_rps,
        utilization=quiet_rps / (300.0 * replicas),
        partitions=64,
    )
    return [(5.0, busy)] + [(5.0, quiet)] * ticks


def test_confident_scale_down_after_hold(clock: FakeClock) -> None:
    # 12 replicas, load fits 3: after 2 x 40 s of low recommendations, one step down.
    seen = _run(clock, _burst_then_quiet(12, 600.0, 30), PolicyConfig())
    downs = [(t, g.desired) for t, g in seen if g.desired < 12]
    assert downs and downs[0][0] >= 5 + 80 and downs[0][1] == 3
    first = next(g for t, g in seen if t == downs[0][0])
    assert "scale_down_confident" in {r.code for r in first.reasons}


def test_small_surplus_waits_for_the_full_window(clock: FakeClock) -> None:
    # 10 replicas where 8 are needed: not a clear surplus, HPA's 300 s window applies.
    seen = _run(clock, _burst_then_quiet(10, 8 * 210.0 - 1, 70), PolicyConfig())
    assert all(g.desired == 10 for t, g in seen if t < 300)
    assert any(g.desired == 8 for t, g in seen if t >= 300)


@pytest.mark.parametrize(
    ("needed_rps", "share", "expected"),
    [
        pytest.param(3590.0, 0.15, {20}, id="drop-of-2-of-20-skipped"),
        pytest.param(16 * 210.0, 0.15, {20, 16}, id="drop-of-4-of-20-taken"),
        pytest.param(3590.0, 0.0, {20, 18}, id="no-minimum-step"),
    ],
)
def test_scale_down_minimum_step(
    clock: FakeClock, needed_rps: float, share: float, expected: set[int]
) -> None:
    cfg = PolicyConfig(scale_down_min_step_share=share)
    seen = _run(clock, _burst_then_quiet(20, needed_rps, 70)[1:], cfg)
    assert {g.desired for _, g in seen} == expected


def test_one_scale_down_per_hold(clock: FakeClock) -> None:
    # Load keeps falling; each drop waits a full hold (80 s) after the previous one.
    ticks = [
        (5.0, make_signals(replicas=16, ready_replicas=16, arrival_rps=16 * 210.0, partitions=64))
    ]
    rps = 16 * 210.0
    for _ in range(250):
        rps = max(210.0, rps - 20.0)
        ticks.append(
            (5.0, make_signals(replicas=16, ready_replicas=16, arrival_rps=rps, partitions=64))
        )
    state, current, changes = ScalerState(), 16, []
    cfg = PolicyConfig()
    for wait, raw in ticks:
        now = clock.tick(wait)
        s = dataclasses.replace(raw, replicas=current, ready_replicas=current, collected_at=now)
        decision, state = decide([s], state, cfg, now)
        if decision.groups[0].desired < current:
            changes.append(now)
        current = decision.groups[0].desired
    assert len(changes) >= 2
    assert all(b - a >= 80 for a, b in itertools.pairwise(changes))


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

"""The fast path, the learned spare, the rate estimate, and standby in decisions and budgets."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from scaler.config import PolicyConfig
from scaler.decision import GroupDecision
from scaler.forecast import estimate_rate
from scaler.policy import decide
from scaler.policy.headroom import load_spare, spare_replicas
from scaler.signals import GroupSignals, ScalerState
from scaler.snapshot import load_snapshot
from tests.unit.scaler.conftest import FakeClock, make_signals

SPARE_1 = PolicyConfig(initial_spare_replicas=1.0)
GROUP = make_signals().group


@pytest.mark.parametrize(
    ("lag_before", "lag_now", "fires"),
    [
        # 4 ready at 300/s; arrivals (window) 1000/s; the lag grows 800/s within 5 s.
        pytest.param(1000, 5000, True, id="lag-outruns-ready-capacity"),
        pytest.param(1000, 1100, False, id="slow-growth-is-not-panic"),
        pytest.param(5000, 1000, False, id="draining"),
    ],
)
def test_fast_path(lag_before: int, lag_now: int, fires: bool) -> None:
    before = make_signals(arrival_rps=1000.0, lag=lag_before, collected_at=0.0, partitions=64)
    _, state = decide([before], ScalerState(), SPARE_1, 0.0)
    now = make_signals(
        arrival_rps=1000.0, lag=lag_now, oldest_age_ms=3000.0, collected_at=5.0, partitions=64
    )
    (g,) = decide([now], state, SPARE_1, 5.0)[0].groups
    reasons = {r.code: r for r in g.reasons}
    assert ("fast_path" in reasons) is fires, g.line()
    if fires:
        # ~1000/s completed (capped by the window) + 800/s piling up: 1800/s = 6 busy,
        # / 0.8 -> 8, plus (5000 + 800 x 40 s) / (300/s x 10 s) = 13 for the backlog.
        assert reasons["fast_path"].numbers["arriving_rps"] == pytest.approx(1800.0)
        assert g.desired == 8 + 13


def test_fast_path_counts_on_warm_standby() -> None:
    kw = {"arrival_rps": 1000.0, "partitions": 64, "standby_replicas": 6}
    before = make_signals(lag=1000, collected_at=0.0, standby_ready_replicas=6, **kw)
    _, state = decide([before], ScalerState(), SPARE_1, 0.0)
    now = make_signals(
        lag=5000, oldest_age_ms=3000.0, collected_at=5.0, standby_ready_replicas=6, **kw
    )
    (g,) = decide([now], state, SPARE_1, 5.0)[0].groups
    reason = next(r for r in g.reasons if r.code == "fast_path")
    # The 4 missing consumers are warm standby: the backlog grows for 1 s, not 40 s.
    assert reason.numbers["projected_lag"] == pytest.approx(5000 + 800 * 1.0)


def _ticks(
    clock: FakeClock, signals_at: Callable[[int, float], GroupSignals], ticks: int = 30
) -> tuple[ScalerState, list[GroupDecision]]:
    """Decide every 5 s on the signals `signals_at(tick, now)`; the state and decisions."""
    state, config, decided = ScalerState(), PolicyConfig(), []
    for tick in range(ticks):
        now = clock.tick(5.0)
        decision, state = decide([signals_at(tick, now)], state, config, now)
        decided.extend(decision.groups)
    return state, decided


def _clean_ticks(
    clock: FakeClock,
    queue_ms: float,
    ticks: int,
    replicas: int = 10,
    e2e_ms: float | None = None,
    engine_ms: float = 150.0,
) -> float:
    """Steady 1500/s on `replicas` (5 busy) with the given queue p99; returns the spare.

    The e2e p99 is the queue p99 plus the engine's p99 unless given. The group is kept
    where it is, so that every window is clean."""
    state, _ = _ticks(
        clock,
        lambda _, now: make_signals(
            replicas=replicas,
            ready_replicas=replicas,
            arrival_rps=1500.0,
            utilization=0.5,
            queue_p99_ms=queue_ms,
            engine_p99_ms=engine_ms,
            e2e_p99_ms=queue_ms + engine_ms if e2e_ms is None else e2e_ms,
            collected_at=now,
        ),
        ticks,
    )
    return spare_replicas(state.get(GROUP), PolicyConfig())


@pytest.mark.parametrize(
    ("queue_ms", "e2e_ms", "engine_ms", "expected"),
    [
        # 5 spare seen; queue p99 at 2x the 350 ms budget -> 10 would have met it.
        pytest.param(700.0, None, 150.0, 10.0, id="breaching-windows-raise-the-spare"),
        # At 0.4 of the budget -> 2 would have been enough.
        pytest.param(140.0, None, 150.0, 2.0, id="calm-windows-lower-the-spare"),
        # Under 20 % of the budget the wait is batch formation: the window counts as if at
        # the floor (70 ms), an upper bound of what it needed -> 1, not the default 4.
        pytest.param(20.0, None, 150.0, 1.0, id="near-empty-queue-teaches-the-floor-bound"),
        # p99s do not add: the longest waits met 100 ms of engine, not its p99's 150, so the
        # queue had 400 ms: 5 x 600 / 400 = 7.5, not the 8.6 that 600 / 350 would teach.
        pytest.param(600.0, 700.0, 150.0, 7.5, id="the-budget-is-what-the-e2e-p99-left"),
        # 800 ms besides the wait, only the engine's 150 of them count: the rest came before
        # the queue (a stalled ingest), which no spare shrinks -> 5 x 300 / 350, not 16.
        pytest.param(300.0, 1100.0, 150.0, 30 / 7, id="time-before-the-queue-teaches-nothing"),
        # An engine p99 of 480 ms leaves the queue the floor of 50 ms -> 5 x 100 / 50 = 10.
        pytest.param(100.0, 600.0, 480.0, 10.0, id="a-slow-engine-leaves-the-floor"),
    ],
)
def test_spare_is_learned_from_clean_windows(
    clock: FakeClock, queue_ms: float, e2e_ms: float | None, engine_ms: float, expected: float
) -> None:
    spare = _clean_ticks(clock, queue_ms, 30, e2e_ms=e2e_ms, engine_ms=engine_ms)
    assert spare == pytest.approx(expected)


@pytest.mark.parametrize(
    ("busy", "expected"),
    [
        # Before the spare is learned: 4 x sqrt(busy), at most the initial guess of 4.
        pytest.param(0.0001, 0.04, id="trickle-keeps-almost-none"),
        pytest.param(0.25, 2.0, id="light-load-keeps-a-little"),
        pytest.param(1.0, 4.0, id="the-guess-holds-from-one-busy-replica"),
        pytest.param(12.0, 4.0, id="heavy-load-keeps-the-guess"),
    ],
)
def test_unlearned_spare_is_square_root_capped(busy: float, expected: float) -> None:
    spare = load_spare(busy, ScalerState().get("g"), PolicyConfig())
    assert spare == pytest.approx(expected, rel=0.01)


def test_a_learned_spare_is_not_capped() -> None:
    """A bursty group at 0.2 busy can need 16 (the on-off family): evidence stands."""
    state = dataclasses.replace(
        ScalerState().get("g"), spare_samples=tuple((float(t), 10.0) for t in range(5))
    )
    assert load_spare(0.01, state, PolicyConfig()) == pytest.approx(10.0)


def test_a_trickle_holds_one_replica(clock: FakeClock) -> None:
    """Live, an idle `up`: 0.3 req/s on a worker that serves 2,815/s was sized
    "0.0 busy + 4.0 spare: 5", and a worker started and stopped every 25-35 s."""
    _, decided = _ticks(
        clock,
        lambda _, now: make_signals(
            replicas=1,
            ready_replicas=1,
            arrival_rps=0.3,
            service_rps_per_replica=2815.0,
            utilization=0.0001,
            queue_p99_ms=3.0,
            lag=0,
            collected_at=now,
        ),
    )
    assert [g.desired for g in decided] == [1] * 30, decided[0].reasons


@pytest.mark.parametrize(
    "changes",
    [
        # A consumer joins or leaves every tick.
        pytest.param(
            lambda tick, now: {
                "ready_replicas": 10 if tick % 2 else 9,
                "starting_replicas": 0 if tick % 2 else 1,
                "queue_p99_ms": 700.0,
            },
            id="membership-changes",
        ),
        # A worker that died and was started again between two ticks leaves the ready count
        # unchanged; its outage window (queue p99 of seconds) taught a spare of 7.5 live.
        pytest.param(
            lambda tick, now: {"queue_p99_ms": 3700.0, "newest_ready_at": now - 3.0},
            id="a-replacement-the-scaler-did-not-order",
        ),
    ],
)
def test_windows_with_a_membership_change_teach_nothing(
    clock: FakeClock, changes: Callable[[int, float], dict[str, float]]
) -> None:
    state, _ = _ticks(
        clock,
        lambda tick, now: make_signals(
            **{
                "replicas": 10,
                "ready_replicas": 10,
                "arrival_rps": 1500.0,
                "utilization": 0.5,
                "collected_at": now,
                **changes(tick, now),
            }
        ),
    )
    config = PolicyConfig()
    assert spare_replicas(state.get(GROUP), config) == config.initial_spare_replicas


@pytest.mark.parametrize(
    ("values", "kind", "level"),
    [
        pytest.param([100.0, 104, 97, 101, 99, 103, 98, 100], "mean", 100.25, id="noise-is-a-mean"),
        pytest.param([100.0, 101, 99, 100, 300, 305, 298], "step", 301.0, id="step-up"),
        pytest.param([300.0, 305, 298, 302, 5, 6, 4], "step", 5.0, id="step-down"),
        pytest.param([100.0 + 20 * i for i in range(10)], "trend", 280.0, id="ramp"),
    ],
)
def test_rate_estimate(values: list[float], kind: str, level: float) -> None:
    samples = [(5.0 * i, v) for i, v in enumerate(values)]
    est = estimate_rate(samples, 30.0, min_t=3.0, step_z=3.0)
    assert est is not None and est.kind == kind
    assert est.level == pytest.approx(level, rel=0.02)
    if kind == "step":
        assert est.rising() is (values[-1] > values[0])


def test_decision_json_names_standby(tmp_path: Path) -> None:
    raw = {
        "now": 10.0,
        "groups": [
            {
                "group": "g",
                "model": "m",
                "tier": "interactive",
                "replicas": 2,
                "ready_replicas": 2,
                "partitions": 12,
                "slo_p99_e2e_ms": 500,
                "collected_at": 10.0,
                "standby_replicas": 3,
                "standby_ready_replicas": 2,
            }
        ],
    }
    path = tmp_path / "s.json"
    path.write_text(json.dumps(raw))
    snap = load_snapshot(path)
    (g,) = decide(snap.signals, snap.state, PolicyConfig(), snap.now)[0].groups
    out = g.to_dict()
    assert out["current_standby"] == 3 and "standby" in out


def test_stale_group_keeps_its_standby() -> None:
    s = make_signals(standby_replicas=3, standby_ready_replicas=3, stale=True)
    (g,) = decide([s], ScalerState(), PolicyConfig(), 0.0)[0].groups
    assert g.diagnosis == "stale_signals" and g.standby == 3


@pytest.mark.parametrize(
    ("budget", "interactive", "batch"),
    [
        # 8+4 and 6+2 want 20: 4 over; batch's 2 standby go first, then 2 of interactive's.
        pytest.param(16, (8, 2), (6, 0), id="standby-cut-lowest-tier-first"),
        # 12: every standby goes, then batch's consumers (floors first, by tier).
        pytest.param(12, (8, 0), (4, 0), id="then-consumers-by-tier"),
        pytest.param(20, (8, 4), (6, 2), id="fits"),
    ],
)
def test_standby_yields_to_consumers_in_the_budget(
    budget: int, interactive: tuple[int, int], batch: tuple[int, int]
) -> None:
    from scaler.policy.budget import share_budget
    from scaler.policy.plan import Plan

    def plan(tier: str, desired: int, standby: int) -> Plan:
        s = make_signals(group=tier, tier=tier, partitions=64)
        return Plan(s, ScalerState().get(tier), desired, "steady", standby=standby)

    got = share_budget([plan("interactive", 8, 4), plan("batch", 6, 2)], budget)
    assert [(p.desired, p.standby) for p in got] == [interactive, batch]


def test_standby_capped_by_partitions() -> None:
    from scaler.policy.guards import cap_standby
    from scaler.policy.plan import Plan

    plan = Plan(
        signals=make_signals(partitions=6),
        state=ScalerState().get("g"),
        desired=4,
        diagnosis="steady",
        standby=5,
    )
    assert cap_standby(plan).standby == 2
    assert cap_standby(dataclasses.replace(plan, standby=1)).standby == 1

"""The SLO policy: seed cases, named steps, tick-by-tick behaviour with a fake clock."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from scaler.config import PolicyConfig
from scaler.policy import POLICIES, decide
from scaler.signals import GroupSignals, GroupState, ScalerState
from scaler.snapshot import load_snapshot
from tests.unit.scaler.conftest import FakeClock, make_signals

EXAMPLES = Path(__file__).parents[3] / "scaler" / "examples"


@pytest.mark.parametrize(
    ("example", "direction", "diagnosis"),
    [
        pytest.param("capacity_bound.json", "up", "capacity_bound", id="busy-rising-queue"),
        pytest.param("engine_bound.json", "hold", "engine_bound", id="slow-engine"),
        pytest.param("idle.json", "down", "idle", id="idle"),
        pytest.param("stale.json", "hold", "stale_signals", id="stale"),
        pytest.param("bursty_gap.json", "up", "capacity_bound", id="gap-between-bursts"),
        pytest.param("trickle.json", "hold", "steady", id="a-trickle-holds-one"),
        pytest.param("scheduled_bursts.json", "up", "capacity_bound", id="a-burst-is-due"),
        pytest.param("at_the_cap.json", "hold", "over_provisioned", id="after-the-cap-was-needed"),
    ],
)
def test_seed_snapshots(example: str, direction: str, diagnosis: str) -> None:
    snap = load_snapshot(EXAMPLES / example)
    decision, _ = decide(snap.signals, snap.state, PolicyConfig(), snap.now)
    (g,) = decision.groups
    assert g.diagnosis == diagnosis
    assert {"up": g.desired > g.current, "down": g.desired < g.current}.get(
        direction, g.desired == g.current
    )


def test_engine_bound_reports_numbers() -> None:
    snap = load_snapshot(EXAMPLES / "engine_bound.json")
    (g,) = decide(snap.signals, snap.state, PolicyConfig(), snap.now)[0].groups
    reason = next(r for r in g.reasons if r.code == "engine_bound")
    assert reason.numbers["e2e_p99_ms"] == 850 and reason.numbers["utilization"] == 0.4


@pytest.mark.parametrize(
    ("engine_p99_ms", "said"),
    [
        pytest.param(780.0, "engine time, more replicas", id="engine-explains-it"),
        pytest.param(5.0, "spent before the queue (ingest, the broker's hops)", id="broker-stall"),
    ],
)
def test_an_unexplained_e2e_is_not_called_engine_time(engine_p99_ms: float, said: str) -> None:
    """After a broker freeze the reason said "engine time" with an engine p99 of 5 ms."""
    s = make_signals(
        engine_p99_ms=engine_p99_ms,
        e2e_p99_ms=9600.0 if engine_p99_ms < 100 else 850.0,
        queue_p99_ms=53.0,
        slo_p99_e2e_ms=500.0,
        utilization=0.01,
    )
    (g,) = decide([s], ScalerState(), PolicyConfig(), s.collected_at)[0].groups
    reason = next(r for r in g.reasons if r.code == "engine_bound")
    assert g.desired == g.current
    assert said in reason.message


def test_a_busy_group_with_an_engine_over_the_slo_is_sized_and_told_so() -> None:
    """At 89 % busy the group is sized for its arrivals (smaller batches help), and the
    reasons say that no replica count meets an SLO the engine's p99 alone exceeds."""
    s = make_signals(
        engine_p99_ms=640.0,
        e2e_p99_ms=680.0,
        queue_p99_ms=25.0,
        oldest_age_ms=40.0,
        slo_p99_e2e_ms=200.0,
        utilization=0.89,
        arrival_rps=1100.0,
    )
    (g,) = decide([s], ScalerState(), PolicyConfig(), s.collected_at)[0].groups
    codes = [r.code for r in g.reasons]
    assert g.diagnosis != "engine_bound" and g.desired > g.current
    over = next(r for r in g.reasons if r.code == "engine_over_slo")
    assert over.numbers == {"engine_p99_ms": 640.0, "slo_p99_e2e_ms": 200.0}
    breach = next(r for r in g.reasons if r.code == "queue_breach")
    assert "the 10% floor: the engine's 640 ms of the e2e p99 leaves less" in breach.message, codes


def test_gap_between_bursts_keeps_the_next_burst() -> None:
    snap = load_snapshot(EXAMPLES / "bursty_gap.json")
    (g,) = decide(snap.signals, snap.state, PolicyConfig(), snap.now)[0].groups
    hold = next(r for r in g.reasons if r.code == "burst_hold")
    # Bursts of 1500/s at 300/s per replica: 5 busy + 4 spare, kept through a 40 s gap.
    assert hold.numbers["peak_load"] == pytest.approx(5.0) and g.desired == 9


def test_a_burst_on_a_schedule_is_started_for_before_it_is_due() -> None:
    snap = load_snapshot(EXAMPLES / "scheduled_bursts.json")
    (g,) = decide(snap.signals, snap.state, PolicyConfig(), snap.now)[0].groups
    due = next(r for r in g.reasons if r.code == "burst_due")
    # Every 300 s, due in 40 s; 1500/s at 300/s is 5 busy (+ 25 %: five bursts are too few
    # for their p75), 11 by the mean, 12 so that no consumer of 12 partitions owns two.
    assert due.numbers["period_s"] == 300.0 and due.numbers["due_in_s"] == 40.0
    assert due.numbers["lead_load"] == pytest.approx(6.25) and g.desired == 12
    assert "due in 40 s" in g.line()


def test_capacity_line_reads_well() -> None:
    snap = load_snapshot(EXAMPLES / "capacity_bound.json")
    (g,) = decide(snap.signals, snap.state, PolicyConfig(), snap.now)[0].groups
    line = g.line()
    assert line.startswith("interactive 4→")
    assert "queue p99 700 ms > budget 350 ms" in line and "rising" in line
    assert "forecast" in {r.code for r in g.reasons}


SPARE_1 = {"initial_spare_replicas": 1.0, "busiest_max_utilization": None}
"""Size as busy + 1 spare replica for the mean, so that the numbers below are easy to follow
(the busiest member's share is tested in test_shares.py)."""


def _one(s: GroupSignals, state: ScalerState | None = None, now: float = 0.0, **cfg: float):
    config = PolicyConfig(**{**SPARE_1, **cfg})  # type: ignore[arg-type]
    decision, new_state = decide([s], state or ScalerState(), config, now)
    return decision.groups[0], new_state


@pytest.mark.parametrize(
    ("overrides", "desired", "code"),
    [
        # 840/s at 300/s per replica: 2.8 busy + 1 spare = 3.8 -> 4, the current size.
        pytest.param({}, 4, "within_band", id="busy-plus-spare-fits-holds"),
        # 1680/s: 5.6 busy + 1 spare = 6.6 -> 7 (5.6 / 0.8 ceiling is also 7).
        pytest.param({"arrival_rps": 1680.0}, 7, "arrival", id="double-arrival"),
        # 2520/s: 8.4 busy, at most 80 % busy -> 11; the topic has 6 partitions.
        pytest.param(
            {"partitions": 6, "arrival_rps": 2520.0}, 6, "partition_capped", id="partitions"
        ),
        pytest.param({"max_replicas": 5, "arrival_rps": 2520.0}, 5, "max_capped", id="max"),
        # lag 30000 beyond the 294 the SLO allows, drained in 10 s at 300/s: +10 over 4.
        pytest.param(
            {"lag": 30_000, "queue_p99_ms": 3000.0, "oldest_age_ms": 4000.0, "partitions": 32},
            14,
            "backlog",
            id="backlog-drains",
        ),
        pytest.param({"arrival_rps": None}, 4, "arrival_unknown", id="no-arrival-holds"),
        # No rate yet, but a lag that waits too long: 6000 drained in 10 s at 300/s is +2.
        pytest.param(
            {"arrival_rps": None, "lag": 6000, "oldest_age_ms": 3000.0, "partitions": 32},
            6,
            "backlog",
            id="no-arrival-old-backlog-drains",
        ),
        pytest.param(
            {"arrival_rps": None, "lag": 6000, "oldest_age_ms": 100.0},
            4,
            "arrival_unknown",
            id="no-arrival-young-backlog-holds",
        ),
        pytest.param(
            {"arrival_rps": None, "lag": 6000, "oldest_age_ms": None, "partitions": 32},
            6,
            "backlog",
            id="no-arrival-backlog-of-unknown-age-drains",
        ),
        # Of unknown age, 100 is what 4 replicas at 300/s clear within the queue budget.
        pytest.param(
            {"arrival_rps": None, "lag": 100, "oldest_age_ms": None},
            4,
            "arrival_unknown",
            id="no-arrival-small-lag-of-unknown-age-holds",
        ),
        # Scaled to zero, nothing is measured: arrivals or lag start one replica.
        pytest.param(
            {
                "replicas": 0,
                "ready_replicas": 0,
                "min_replicas": 0,
                "warm_replicas": 0,
                "service_rps_per_replica": None,
                "utilization": None,
                "arrival_rps": 50.0,
                "lag": 500,
            },
            1,
            "scale_from_zero",
            id="scaled-to-zero-starts-one",
        ),
        # 95 % busy on 4 ready = 3.8 busy: 3.8 / 0.8 -> 5.
        pytest.param(
            {"service_rps_per_replica": None, "utilization": 0.95},
            5,
            "utilization",
            id="no-throughput-uses-utilization",
        ),
    ],
)
def test_sizing_steps(overrides: dict[str, object], desired: int, code: str) -> None:
    g, _ = _one(make_signals(**overrides))
    assert g.desired == desired, g.line()
    assert code in {r.code for r in g.reasons}


@pytest.mark.parametrize(
    ("spare", "desired"),
    [
        pytest.param(1.0, 4, id="one-spare"),
        pytest.param(4.0, 7, id="four-spare"),
        pytest.param(0.0, 4, id="no-spare-ceiling-80pct"),
    ],
)
def test_spare_is_added_to_busy(spare: float, desired: int) -> None:
    # 840/s at 300/s: 2.8 busy; the ceiling (80 %) alone asks 3.5 -> 4.
    g, _ = _one(make_signals(), initial_spare_replicas=spare, min_spare_replicas=0.0)
    assert g.desired == desired, g.line()


def test_queue_breach_adds_one_when_rates_look_fine() -> None:
    g, _ = _one(make_signals(queue_p99_ms=900.0, oldest_age_ms=800.0, e2e_p99_ms=1000.0))
    assert g.desired == 5 and "queue_breach" in {r.code for r in g.reasons}


def test_queue_spike_already_drained_is_ignored() -> None:
    g, _ = _one(make_signals(queue_p99_ms=900.0, oldest_age_ms=30.0, e2e_p99_ms=1000.0))
    assert g.desired == 4


def test_scale_up_is_immediate_scale_down_waits_for_history_then_hold(clock: FakeClock) -> None:
    state = ScalerState()
    busy = make_signals(arrival_rps=1680.0)
    g, state = _one(busy, state, clock.now)
    assert g.desired == 7
    quiet = make_signals(replicas=7, ready_replicas=7, arrival_rps=840.0, utilization=0.4)
    seen = []
    for _ in range(30):
        now = clock.tick(5)
        g, state = _one(dataclasses.replace(quiet, collected_at=now), state, now)
        seen.append((now, g.desired, {r.code for r in g.reasons}))
    # No scale-down before 60 s of history (the forecast window), then down to 4 at once.
    assert all(d == 7 for t, d, _ in seen if t < 60)
    assert "scale_down_waits_for_history" in seen[0][2]
    first_down = next((t, d) for t, d, _ in seen if d < 7)
    assert first_down[1] == 4 and first_down[0] >= 60


def test_forecast_starts_replicas_early(clock: FakeClock) -> None:
    state = ScalerState()
    for i in range(12):
        now = clock.tick(5)
        rps = 700.0 + 15.0 * i
        s = make_signals(arrival_rps=rps, collected_at=now, utilization=rps / 1200)
        g, state = _one(s, state, now)
    # Arrival ~865/s now, rising 3/s per second: 47.5 s ahead ~1000/s needs more than 4.
    assert g.desired > 4 and any(r.code == "forecast" for r in g.reasons)


def test_noisy_steady_arrivals_are_not_a_trend(clock: FakeClock) -> None:
    state = ScalerState()
    for i in range(12):
        now = clock.tick(5)
        rps = 840.0 + (60.0 if i % 2 else -60.0)
        g, state = _one(make_signals(arrival_rps=rps, collected_at=now), state, now)
        assert "forecast" not in {r.code for r in g.reasons}


def test_stale_never_scales_down_then_falls_back(clock: FakeClock) -> None:
    state = ScalerState()
    g, state = _one(make_signals(collected_at=0.0), state, 0.0)
    old = make_signals(replicas=0, ready_replicas=0, arrival_rps=0.0, collected_at=0.0)
    diagnoses = []
    for _ in range(3):
        now = clock.tick(60)
        g, state = _one(old, state, now, fallback_replicas=2)
        diagnoses.append((g.diagnosis, g.desired))
    assert diagnoses == [("stale_signals", 0), ("stale_signals", 0), ("fallback", 2)]


def test_vanished_group_is_held_as_stale() -> None:
    _, state = _one(make_signals(), ScalerState(), 0.0)
    decision, _ = decide([], state, PolicyConfig(), 5.0)
    (g,) = decision.groups
    assert g.diagnosis == "stale_signals" and g.desired == g.current == 4


def _tiered(tier: str, desired_rps: float, replicas: int) -> GroupSignals:
    return make_signals(
        group=f"g.{tier}",
        tier=tier,
        arrival_rps=desired_rps,
        replicas=replicas,
        ready_replicas=replicas,
        slo_p99_e2e_ms=500.0 if tier != "batch" else 60000.0,
    )


def test_budget_takes_from_batch_first() -> None:
    signals = [
        _tiered("batch", 2100.0, 10),
        _tiered("interactive", 2100.0, 4),
        _tiered("critical", 840.0, 4),
    ]
    config = PolicyConfig(max_total_replicas=20, **SPARE_1)  # type: ignore[arg-type]
    decision, _ = decide(signals, ScalerState(), config, 0.0)
    got = {g.tier: (g.desired, g.diagnosis) for g in decision.groups}
    # critical 2.8 busy -> 4; interactive 7 busy / 0.8 -> 9; batch keeps its 10 (within
    # one of its 9) but only 20 - 4 - 9 = 7 are left for it.
    assert got["critical"][0] == 4
    assert got["interactive"][0] == 9
    assert got["batch"] == (7, "budget_capped")
    assert sum(g.desired for g in decision.groups) == 20


def test_budget_keeps_floors_before_growth() -> None:
    signals = [_tiered("batch", 0.0, 1), _tiered("interactive", 30_000.0, 4)]
    decision, _ = decide(signals, ScalerState(), PolicyConfig(max_total_replicas=12), 0.0)
    got = {g.tier: g.desired for g in decision.groups}
    assert got == {"batch": 1, "interactive": 11}


def _six_groups(working: set[str]) -> list[GroupSignals]:
    """Two models' three tiers, one replica each; a group in `working` has 1 request in lag."""
    return [
        make_signals(
            group=f"inferbus.workers.{model}.{tier}",
            model=model,
            tier=tier,
            replicas=1,
            ready_replicas=1,
            arrival_rps=0.0,
            lag=1 if f"{model}.{tier}" in working else 0,
            slo_p99_e2e_ms=60000.0 if tier == "batch" else 500.0,
        )
        for model in ("a", "b")
        for tier in ("critical", "interactive", "batch")
    ]


@pytest.mark.parametrize(
    ("working", "without"),
    [
        pytest.param(set(), {"a.batch", "b.batch"}, id="idle: lower tiers yield first"),
        pytest.param({"a.batch"}, {"b.interactive", "b.batch"}, id="batch with work gets one"),
        pytest.param(
            {"a.batch", "b.batch", "a.interactive", "b.interactive", "a.critical", "b.critical"},
            {"a.batch", "b.batch"},
            id="all with work: by priority",
        ),
        pytest.param({"b.batch", "a.critical"}, {"b.interactive", "a.batch"}, id="mixed"),
    ],
)
def test_a_budget_below_the_groups_count_serves_groups_with_work_first(
    working: set[str], without: set[str]
) -> None:
    decision, _ = decide(
        _six_groups(working), ScalerState(), PolicyConfig(max_total_replicas=4), 0.0
    )
    got = {g.group.removeprefix("inferbus.workers."): g.desired for g in decision.groups}
    assert {name for name, n in got.items() if n == 0} == without, got
    assert sum(got.values()) == 4


def test_duplicate_groups_rejected() -> None:
    with pytest.raises(ValueError, match="twice"):
        decide([make_signals(), make_signals()], ScalerState(), PolicyConfig(), 0.0)


def test_registry_names() -> None:
    assert set(POLICIES) == {"slo", "keda-lag", "hpa-util"}


def test_a_rate_read_from_the_samples_names_the_last_window_too() -> None:
    """The reason's rate is read from the last minute (here a mean of noisy windows); where
    it is not what the last window measured, both are given."""
    group = "inferbus.workers.m.interactive"
    noisy = tuple((float(t), 1000.0 if t % 10 else 200.0) for t in range(-55, 0, 5))
    state = ScalerState(groups=(GroupState(group=group, arrival_samples=noisy),))
    s = make_signals(arrival_rps=400.0, collected_at=0.0)
    (g,) = decide([s], state, PolicyConfig(), 0.0)[0].groups
    line = g.line()
    assert "(read from 60 s of samples; the last window measured 400/s)" in line, line


@pytest.mark.parametrize(
    "age_s", [0.0, 940.0], ids=["recent-history", "history-from-before-an-outage"]
)
def test_samples_older_than_the_window_before_the_tick_are_not_read(age_s: float) -> None:
    """A collector outage leaves the memory as old as the outage: the first fresh tick read
    its rate from samples a window before the newest old one, not before the tick."""
    group = "inferbus.workers.m.interactive"
    old = tuple((float(t) - age_s, 1000.0 if t % 10 else 200.0) for t in range(-55, 0, 5))
    state = ScalerState(groups=(GroupState(group=group, arrival_samples=old),))
    s = make_signals(arrival_rps=400.0, collected_at=0.0)
    (g,) = decide([s], state, PolicyConfig(), 0.0)[0].groups
    read = "read from 60 s of samples" in g.line()
    assert read is (age_s == 0.0), g.line()


@pytest.mark.parametrize(
    ("overrides", "desired", "code"),
    [
        pytest.param({"max_replicas": 12}, 12, "max_capped", id="over-the-max"),
        pytest.param({"partitions": 12}, 12, "partition_capped", id="over-the-partitions"),
    ],
)
def test_a_held_scale_down_still_obeys_the_max_and_the_partitions(
    overrides: dict[str, int], desired: int, code: str
) -> None:
    """A fresh scaler holds a scale-down until it has history, at the current count: 20
    replicas over a max of 12 stayed 20 (a max lowered, replicas started by hand)."""
    s = make_signals(replicas=20, ready_replicas=20, partitions=32, arrival_rps=100.0)
    (g,) = decide([dataclasses.replace(s, **overrides)], ScalerState(), PolicyConfig(), 0.0)[
        0
    ].groups
    assert g.desired == desired
    codes = [r.code for r in g.reasons]
    assert {"scale_down_waits_for_history", code} <= set(codes), g.line()
    assert len(codes) == len(set(codes)), g.line()


@pytest.mark.parametrize("policy", sorted(p for p in POLICIES if POLICIES[p].partition_cap))
def test_each_bound_is_said_once_when_the_floor_is_over_the_partitions(policy: str) -> None:
    """min 4 on 2 partitions: raised to the floor, capped at the partitions, once each."""
    s = make_signals(
        replicas=2,
        ready_replicas=2,
        partitions=2,
        min_replicas=4,
        warm_replicas=4,
        arrival_rps=10.0,
    )
    (g,) = POLICIES[policy]([s], ScalerState(), PolicyConfig(), 0.0)[0].groups
    codes = [r.code for r in g.reasons]
    assert g.desired == 2
    assert codes.count("floor") == 1 and codes.count("partition_capped") == 1, g.line()


@pytest.mark.parametrize(
    ("overrides", "now", "words"),
    [
        pytest.param({"stale": True}, 0.0, "flagged stale by the collector", id="flagged"),
        pytest.param({}, 95.0, "signals 95 s old", id="old"),
        pytest.param(
            {"arrival_rps": 0.002, "service_rps_per_replica": 0.004, "utilization": 0.5},
            0.0,
            "at 0.004/s per replica",
            id="a-slow-replica-is-not-0-a-second",
        ),
    ],
)
def test_a_reason_says_what_it_saw(overrides: dict[str, object], now: float, words: str) -> None:
    s = make_signals(**overrides)
    (g,) = decide([s], ScalerState(), PolicyConfig(), now)[0].groups
    assert words in g.line(), g.line()


@pytest.mark.parametrize(
    ("time_to_ready_s", "metrics_window_s", "reaction_s"),
    [
        pytest.param(40.0, 15.0, 40.0, id="slow-start-is-the-time-to-ready"),
        pytest.param(5.0, 15.0, 30.0, id="fast-start-waits-two-windows"),
        pytest.param(None, 15.0, 30.0, id="unmeasured-takes-the-default"),
        pytest.param(5.0, 5.0, 10.0, id="a-shorter-window-answers-sooner"),
    ],
)
def test_the_policys_timing_follows_the_reaction_time_not_a_bare_fast_start(
    time_to_ready_s: float | None, metrics_window_s: float, reaction_s: float
) -> None:
    config = PolicyConfig(metrics_window_s=metrics_window_s)
    s = make_signals(time_to_ready_s=time_to_ready_s)
    assert config.reaction_s(s) == reaction_s
    assert config.hold_s(s) == reaction_s
    assert config.keep_cost_s(s) == reaction_s + config.rebalance_pause_s
    assert config.horizon_s(s) == reaction_s + metrics_window_s / 2
    # What waits on a start still waits for the start itself.
    assert config.time_to_ready_s(s) == (time_to_ready_s or config.default_time_to_ready_s)

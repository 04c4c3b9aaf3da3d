"""The SLO policy: seed cases, named steps, tick-by-tick behaviour with a fake clock."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from scaler.policy import POLICIES, decide
from scaler.signals import GroupSignals, PolicyConfig, ScalerState, load_snapshot
from tests.unit.scaler.conftest import FakeClock, make_signals

EXAMPLES = Path(__file__).parents[3] / "scaler" / "examples"


@pytest.mark.parametrize(
    ("example", "direction", "diagnosis"),
    [
        pytest.param("capacity_bound.json", "up", "capacity_bound", id="busy-rising-queue"),
        pytest.param("engine_bound.json", "hold", "engine_bound", id="slow-engine"),
        pytest.param("idle.json", "down", "idle", id="idle"),
        pytest.param("stale.json", "hold", "stale_signals", id="stale"),
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


def test_capacity_line_reads_well() -> None:
    snap = load_snapshot(EXAMPLES / "capacity_bound.json")
    (g,) = decide(snap.signals, snap.state, PolicyConfig(), snap.now)[0].groups
    line = g.line()
    assert line.startswith("interactive 4→")
    assert "queue p99 700 ms > budget 350 ms" in line and "forecast" in line


def _one(s: GroupSignals, state: ScalerState | None = None, now: float = 0.0, **cfg: float):
    decision, new_state = decide([s], state or ScalerState(), PolicyConfig(**cfg), now)  # type: ignore[arg-type]
    return decision.groups[0], new_state


@pytest.mark.parametrize(
    ("overrides", "desired", "code"),
    [
        pytest.param({}, 4, "within_band", id="at-target-holds"),
        pytest.param({"arrival_rps": 1680.0}, 8, "arrival", id="double-arrival-doubles"),
        pytest.param(
            {"partitions": 6, "arrival_rps": 2520.0}, 6, "partition_capped", id="partitions"
        ),
        pytest.param({"max_replicas": 5, "arrival_rps": 2520.0}, 5, "max_capped", id="max"),
        pytest.param(
            {"lag": 30_000, "queue_p99_ms": 3000.0, "oldest_age_ms": 4000.0, "partitions": 32},
            14,
            "backlog",
            id="backlog-drains",
        ),
        pytest.param({"arrival_rps": None}, 4, "arrival_unknown", id="no-arrival-holds"),
        pytest.param(
            {"service_rps_per_replica": None, "utilization": 0.95},
            6,
            "utilization",
            id="no-throughput-uses-utilization",
        ),
    ],
)
def test_sizing_steps(overrides: dict[str, object], desired: int, code: str) -> None:
    g, _ = _one(make_signals(**overrides))
    assert g.desired == desired
    assert code in {r.code for r in g.reasons}


def test_queue_breach_adds_one_when_rates_look_fine() -> None:
    g, _ = _one(make_signals(queue_p99_ms=900.0, oldest_age_ms=800.0, e2e_p99_ms=1000.0))
    assert g.desired == 5 and "queue_breach" in {r.code for r in g.reasons}


def test_queue_spike_already_drained_is_ignored() -> None:
    g, _ = _one(make_signals(queue_p99_ms=900.0, oldest_age_ms=30.0, e2e_p99_ms=1000.0))
    assert g.desired == 4


def test_scale_up_is_immediate_scale_down_waits_for_window(clock: FakeClock) -> None:
    state = ScalerState()
    busy = make_signals(arrival_rps=1680.0)
    g, state = _one(busy, state, clock.now)
    assert g.desired == 8
    quiet = make_signals(replicas=8, ready_replicas=8, arrival_rps=840.0, utilization=0.35)
    seen = []
    for _ in range(70):
        now = clock.tick(5)
        g, state = _one(
            dataclasses.replace(quiet, collected_at=now), state, now, scale_down_hold_s=300.0
        )
        seen.append((now, g.desired))
    # Without the fast path (hold = window): held at 8, the window's highest
    # recommendation, until 300 s have passed.
    assert all(d == 8 for t, d in seen if t < 300)
    assert any(d == 4 for t, d in seen if t >= 300)


def test_forecast_starts_replicas_early(clock: FakeClock) -> None:
    state = ScalerState()
    for i in range(12):
        now = clock.tick(5)
        rps = 700.0 + 15.0 * i
        s = make_signals(arrival_rps=rps, collected_at=now, utilization=rps / 1200)
        g, state = _one(s, state, now)
    # Arrival ~865/s now, rising ~3/s per second: 40 s ahead it needs more than 4.
    assert g.desired > 4 and any(r.code == "forecast" for r in g.reasons)


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
    decision, _ = decide(signals, ScalerState(), PolicyConfig(max_total_replicas=20), 0.0)
    got = {g.tier: (g.desired, g.diagnosis) for g in decision.groups}
    assert got["critical"][0] == 4
    assert got["interactive"][0] == 10
    assert got["batch"] == (6, "budget_capped")
    assert sum(g.desired for g in decision.groups) == 20


def test_budget_keeps_floors_before_growth() -> None:
    signals = [_tiered("batch", 0.0, 1), _tiered("interactive", 30_000.0, 4)]
    decision, _ = decide(signals, ScalerState(), PolicyConfig(max_total_replicas=12), 0.0)
    got = {g.tier: g.desired for g in decision.groups}
    assert got == {"batch": 1, "interactive": 11}


def test_duplicate_groups_rejected() -> None:
    with pytest.raises(ValueError, match="twice"):
        decide([make_signals(), make_signals()], ScalerState(), PolicyConfig(), 0.0)


def test_registry_names() -> None:
    assert set(POLICIES) == {"slo", "keda-lag", "hpa-util"}

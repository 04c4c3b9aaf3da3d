"""The pure parts of `inferbus bench scale-step`: schedule, send times, report arithmetic."""

from __future__ import annotations

import pytest

from services.bench.step_analysis import (
    Answer,
    Tick,
    analyze,
    attainment,
    completeness,
    direction_changes,
    summary_line,
)
from services.bench.step_build import sim_model_config
from services.bench.step_schedule import (
    ScaleStepOptions,
    phase_at,
    phase_bounds,
    send_times,
    step_schedule,
)


def tick(t: float, lag: int, replicas: int, ready: int, cur: int, want: int) -> Tick:
    return Tick(
        t=t, phase="", offered_rps=0, arrival_rps=None, lag=lag, replicas=replicas, ready=ready,
        starting=replicas - ready, service_rps_per_replica=None, utilization=None,
        queue_p99_ms=None, engine_p99_ms=None, e2e_p99_ms=None, current=cur, desired=want,
        applied=cur != want, line=f"{cur}->{want}",
    )  # fmt: skip


def test_schedule_is_low_high_low_and_send_times_pace_each_phase() -> None:
    phases = step_schedule(10, 40, 2, 3, 1)
    assert [(p.name, p.rate_rps, p.duration_s) for p in phases] == [
        ("before", 10, 2), ("step", 40, 3), ("after", 10, 1),
    ]  # fmt: skip
    assert phase_bounds(phases) == [("before", 0, 2), ("step", 2, 5), ("after", 5, 6)]
    times = send_times(phases)
    assert len(times) == 20 + 120 + 10
    assert times[:2] == [0.0, 0.1]
    assert times[20] == 2.0 and times[21] == pytest.approx(2.025)
    assert times[140] == 5.0 and times[-1] == pytest.approx(5.9)
    assert times == sorted(times)
    assert [phase_at(phases, t) for t in (-1, 0, 1.99, 2, 5, 6)] == [
        "warmup", "before", "before", "step", "after", "drain",
    ]  # fmt: skip
    with pytest.raises(ValueError):
        step_schedule(0, 40, 1, 1, 1)


def test_the_kill_phase_goes_on_at_the_step_rate_and_counts_as_high_load() -> None:
    phases = step_schedule(10, 40, 2, 3, 1, kill_s=4)
    assert [(p.name, p.rate_rps) for p in phases] == [
        ("before", 10), ("step", 40), ("kill", 40), ("after", 10),
    ]  # fmt: skip
    assert phase_bounds(phases)[2] == ("kill", 5, 9)
    assert len(send_times(phases)) == 20 + 120 + 160 + 10
    options = ScaleStepOptions(before_s=10, step_s=20, kill_s=10, after_s=10)
    ticks = [tick(12, 0, 1, 1, 1, 3), tick(35, 0, 3, 3, 3, 3), tick(42, 0, 3, 3, 3, 1)]
    r = analyze(ticks, [], options)["reaction"]
    # The scale-down is timed from the end of the high load (the kill phase's end, 40 s).
    assert r["first_scale_down_after_step_s"] == 2


def test_reaction_times_from_recorded_ticks() -> None:
    options = ScaleStepOptions(before_s=10, step_s=20, after_s=10, drain_lag=5, kill_s=0)
    ticks = [
        tick(8, 0, 1, 1, 1, 1),
        tick(12, 80, 1, 1, 1, 3),  # first scale-up, 2 s after the step
        tick(14, 150, 3, 1, 3, 3),
        tick(16, 120, 3, 3, 3, 3),  # the new replicas ready at +6 s
        tick(18, 40, 3, 3, 3, 3),
        tick(20, 4, 3, 3, 3, 3),  # drained at +10 s
        tick(22, 300, 3, 3, 3, 3),  # a second backlog: the peak, not the first drain
        tick(24, 0, 3, 3, 3, 3),
        tick(32, 0, 3, 3, 3, 1),  # scale-down 2 s after the step ended
        tick(34, 0, 1, 1, 1, 1),
    ]
    report = analyze(ticks, [], options)
    r = report["reaction"]
    assert r["first_scale_up_s"] == 2 and r["first_scale_up_to"] == 3
    assert r["ready_s"] == 6
    assert (r["peak_lag"], r["peak_lag_s"], r["lag_drained_s"]) == (300, 12, 10)
    assert (r["peak_replicas"], r["peak_desired"]) == (3, 3)
    assert r["first_scale_down_after_step_s"] == 2
    assert (r["final_replicas"], r["scaling_actions"], r["direction_changes"]) == (1, 2, 1)
    # 175 req/s over one replica's 50 req/s at batch 1 (4 + 16 ms): 4 replicas.
    assert report["needed_replicas"]["step_at_batch_1"] == 4


def test_no_scale_up_and_no_backlog_are_reported_as_such() -> None:
    options = ScaleStepOptions(before_s=10, step_s=20, after_s=10, drain_lag=5)
    r = analyze([tick(12, 3, 1, 1, 1, 1), tick(14, 2, 1, 1, 1, 1)], [], options)["reaction"]
    assert r["first_scale_up_s"] is None and r["ready_s"] is None
    assert r["peak_lag"] == 3 and r["lag_drained_s"] is None


def test_flapping_counts_direction_changes() -> None:
    ups_and_downs = [tick(0, 0, 1, 1, 1, 2), tick(2, 0, 2, 2, 2, 1), tick(4, 0, 1, 1, 1, 3)]
    assert direction_changes(ups_and_downs) == 2
    assert direction_changes([tick(0, 0, 1, 1, 1, 2), tick(2, 0, 2, 2, 2, 4)]) == 0


def test_every_request_is_accounted_for_and_attainment_is_per_phase() -> None:
    phases = step_schedule(1, 1, 10, 10, 10)
    answers = [
        Answer(1, "ok", 100, 110),
        Answer(2, "ok", 1500, 1510),  # ok but over the SLO
        Answer(12, "ok", 900, 905),
        Answer(13, "queue_full", None, 5),  # a named rejection: a miss, not missing
        Answer(14, None, None, None),  # never answered: missing, a miss
        Answer(25, "ok", 200, 210),
    ]
    c = completeness(answers)
    assert c == {
        "sent": 6, "ok": 4, "rejected": {"queue_full": 1}, "missing": 1, "all_answered": False,
    }  # fmt: skip
    a = attainment(answers, phases, slo_ms=1000)
    assert (a["before"]["sent"], a["before"]["within_slo"], a["before"]["attainment"]) == (
        2,
        1,
        0.5,
    )
    assert (a["step"]["sent"], a["step"]["ok"], a["step"]["attainment"]) == (3, 1, 0.3333)
    assert a["after"]["attainment"] == 1.0
    assert a["before"]["e2e_max_ms"] == 1500


def test_summary_line_and_model_config() -> None:
    options = ScaleStepOptions(before_s=10, step_s=20, after_s=10)
    report = {"options": {"low_rps": 25, "high_rps": 175, "slo_p99_ms": 1000}}
    report.update(analyze([tick(12, 80, 1, 1, 1, 3)], [Answer(11, "ok", 10, 12)], options))
    line = summary_line(report)
    assert "first scale-up +2s (→3)" in line and "answered ok 1/1" in line and "missing 0" in line
    config = sim_model_config(options)
    assert config.engine.kind == "sim" and config.tiers == ["interactive"]
    assert config.slo_for("interactive").p99_e2e_ms == 1000
    assert (config.replicas.min, config.replicas.max) == (1, 8)
    assert 40 <= options.capacity_rps(1) <= 60

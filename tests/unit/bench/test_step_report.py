"""The scale-step report's newer parts: served records, CPU per phase, targets, live vs sim."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from scaler.sim.workload import from_trace
from schemas.telemetry import InstanceRecord
from services.bench import step_sim
from services.bench.handover import Served
from services.bench.step_report import (
    Landed,
    Reply,
    cpu_by_phase,
    handover_lines,
    latency_breakdown,
    others_by_phase,
    owner_records,
    served_records,
    targets,
    time_to_ready,
    worker_cores,
)
from services.bench.step_sim import StepSimInputs

ORIGIN = 1_000_000.0


def test_served_records_put_the_read_at_timestamp_plus_queue_ms() -> None:
    landed = {"a": Landed(3, 10, ORIGIN + 1.0), "b": Landed(3, 11, ORIGIN + 1.5)}
    replies = {"a": Reply("ok", "w1", 250.0)}
    served, unseen = served_records(["a", "b", "c"], replies, landed, ORIGIN)
    assert unseen == 1  # "c" never showed on the tier topic
    assert served[0] == Served(3, 10, 1.0, pytest.approx(1.25), "w1")  # type: ignore[arg-type]
    assert served[1] == Served(3, 11, 1.5, None, None)  # never answered


def _record(at: float, state: str, owned: list[int], **extra: Any) -> InstanceRecord:
    stamp = datetime.fromtimestamp(ORIGIN + at, UTC)
    return InstanceRecord(
        instance_id=extra.pop("instance_id", "w1"),
        model="m",
        tiers=["interactive"],
        group="g",
        state=state,  # type: ignore[arg-type]
        started_at=stamp,
        updated_at=stamp,
        owned={"t": owned},
        **extra,
    )


def test_owner_records_and_time_to_ready_from_registry_records() -> None:
    records = [
        _record(
            2.0,
            "ready",
            [0, 1],
            pid=4242,
            time_to_ready_s=2.5,
            ready_at=datetime.fromtimestamp(ORIGIN + 2, UTC),
        ),
        _record(1.0, "loading", []),
        _record(3.0, "gone", [0, 1]),
        _record(
            -50.0,
            "ready",
            [2],
            instance_id="old",
            time_to_ready_s=9.0,
            ready_at=datetime.fromtimestamp(ORIGIN - 50, UTC),
        ),
    ]
    owners = owner_records(records, "t", ORIGIN)
    assert [(o.t, o.state, sorted(o.owned)) for o in owners] == [
        (pytest.approx(-50.0), "ready", [2]),
        (pytest.approx(1.0), "loading", []),
        (pytest.approx(2.0), "ready", [0, 1]),
        (pytest.approx(3.0), "gone", []),  # gone owns nothing, whatever it says
    ]
    ready = time_to_ready(records, ORIGIN - 10, {4242: ORIGIN - 1.0})
    assert (ready["workers"], ready["median_s"], ready["max_s"]) == (1, 2.5, 2.5)
    # Seen spawned at -1 s, ready at +2 s: 3 s from spawn to ready.
    assert (ready["spawn_to_ready_median_s"], ready["spawn_to_ready_max_s"]) == (3.0, 3.0)
    assert time_to_ready(records, ORIGIN + 10)["median_s"] is None


def test_cpu_by_phase_is_cores_busy_per_role_and_the_rest_of_the_machine() -> None:
    samples = [
        (ORIGIN + 0.0, 100.0, {"broker": 10.0, "workers": 5.0}),
        (ORIGIN + 5.0, 105.0, {"broker": 12.0, "workers": 6.0}),
        (ORIGIN + 10.0, 115.0, {"broker": 17.0, "workers": 9.0}),
    ]
    out = cpu_by_phase(samples, [("before", 0, 5), ("step", 5, 10), ("none", 20, 30)], ORIGIN)
    assert out["before"] == {"broker": 0.4, "workers": 0.2, "machine": 1.0, "other": 0.4}
    assert out["step"] == {"broker": 1.0, "workers": 0.6, "machine": 2.0, "other": 0.4}
    assert "none" not in out
    cores = worker_cores(
        {7: [(ORIGIN, 1.0), (ORIGIN + 4, 3.0)], 8: [(ORIGIN, 1.0)]}, ORIGIN, ORIGIN + 9
    )
    assert cores == {"7": 0.5}


def _report(**over: Any) -> dict[str, Any]:
    report: dict[str, Any] = {
        "slo_attainment": {"step": {"attainment": 0.95}, "after": {"attainment": 0.98}},
        "handover": {
            "changes": [{"trigger": "join"}, {"trigger": "join"}, {"trigger": "kill"}],
            "still": {
                "longest_gap_s": 0.6,
                "partition": 4,
                "trigger": "join",
                "at_change_t": 33.0,
                "longest_gap_since_change_s": 0.3,
            },
            "moved": {
                "count": 6,
                "longest_gap_s": 1.2,
                "longest_gap_since_change_s": 0.7,
                "median_gap_s": 0.2,
                "median_acquired_s": 0.3,
            },
            "kills": [
                {
                    "instance": "w1",
                    "pid": 7,
                    "partitions": [0, 1],
                    "t": 125.0,
                    "gone_announced_s": 0.5,
                    "served_again_s": 0.9,
                    "lease_s": 6.0,
                    "bound_s": 8.0,
                    "within_bound": True,
                }
            ],
        },
        "duplicates": {
            "lost": 0,
            "answered_more_than_once": 2,
            "repeat_records": 2,
            "answered_twice_after_dedupe": 0,
        },
    }
    report.update(over)
    return report


def test_targets_say_what_is_met_and_what_is_missed() -> None:
    rows = {r["measure"]: r for r in targets(_report())}
    assert rows["attainment during the step"]["met"] is True
    assert rows["attainment after the step"]["met"] is False  # 98 % < 99 %
    since = "from the change's start (s)"
    whole = "(whole stall, with any part before the change, s)"
    assert rows[f"longest pause of a partition that did not move, {since}"]["met"] is True
    assert rows[f"longest wait on a moved partition, {since}"]["met"] is True  # 0.7 s
    # The whole stalls are reported beside them, against the same bounds, as references.
    assert rows[f"longest gap of a partition that did not move {whole}"]["reference"] is True
    assert rows[f"longest gap of a partition that did not move {whole}"]["met"] is False
    assert rows[f"longest gap of a moved partition {whole}"]["met"] is False  # 1.2 s > 1 s
    kill = rows["killed worker's partitions served again (s after the kill)"]
    assert kill["met"] is True and kill["target"] == "<= 8 (lease 6 + 2)"
    assert rows["lost"]["met"] is True and rows["answered twice after dedupe"]["met"] is True
    empty = {r["measure"]: r for r in targets(_report(handover={}))}
    assert empty["longest wait on a moved partition, from the change's start (s)"]["met"] is None


def test_handover_lines_name_the_worst_cases() -> None:
    report = _report()
    report["targets"] = targets(report)
    text = "\n".join(handover_lines(report))
    assert "3 membership changes (2 join, 1 kill)" in text
    assert "longest gap 0.60 s (partition 4, join at t=33.0)" in text
    assert "counted from each change's start: stayed 0.30 s, moved 0.70 s" in text
    assert "served again +0.90 s (bound 8 s: met)" in text
    assert "answered twice after dedupe 0" in text
    assert (
        "reference longest gap of a moved partition (whole stall, with any part before the "
        "change, s): 1.2 (over <= 1; not a target)"
    ) in text
    assert "target longest wait on a moved partition, from the change's start (s): 0.7" in text


@pytest.mark.parametrize(
    ("samples", "window", "expected"),
    [
        pytest.param([(0.0, 1), (10.0, 3)], (0.0, 20.0), 10 + 30, id="steps"),
        pytest.param([(-5.0, 2), (5.0, 1)], (0.0, 10.0), 2 * 5 + 5, id="clipped-at-the-start"),
        pytest.param([(0.0, 4)], (0.0, 2.5), 10, id="last-sample-held-to-the-end"),
        pytest.param([], (0.0, 10.0), 0, id="nothing"),
    ],
)
def test_replica_seconds(
    samples: list[tuple[float, int]], window: tuple[float, float], expected: float
) -> None:
    assert step_sim.replica_seconds(samples, *window) == pytest.approx(expected)


def test_side_by_side_within_the_tolerance() -> None:
    out = step_sim.side_by_side(
        {"attainment_all": 0.9, "replica_seconds": 500.0, "x": None},
        {"attainment_all": 1.0, "replica_seconds": 300.0, "x": 1.0},
    )
    assert out["attainment_all"] == {
        "live": 0.9, "sim": 1.0, "live_over_sim": 0.9, "within": True,
    }  # fmt: skip
    assert out["replica_seconds"]["within"] is False  # 1.67x
    assert out["x"]["within"] is False and out["x"]["live_over_sim"] is None


INPUTS = StepSimInputs(
    a_ms=4.0,
    b_ms=16.0,
    max_batch_size=2,
    max_queue_delay_ms=5.0,
    slo_ms=1000.0,
    partitions=12,
    time_to_ready_s=3.0,
    handover_pause_s=0.3,
    interval_s=2.0,
    min_replicas=1,
    max_replicas=8,
    initial_replicas=1,
    scale_down_window_s=30.0,
)


def test_the_simulated_step_scales_out_and_serves_what_one_replica_cannot() -> None:
    offsets = [i / 25 for i in range(25 * 10)] + [10 + i / 150 for i in range(150 * 30)]
    run = step_sim.run(offsets, max(offsets), INPUTS)
    assert max(t.replicas for t in run.ticks) >= 3
    answers = step_sim.outcome_answers(run)
    assert len(answers) == len(offsets) and all(e is not None for _, e in answers)
    assert run.groups[0].replica_seconds > max(offsets)


def test_written_inputs_replay_the_same_arrivals_with_inferbus_sim(tmp_path: Path) -> None:
    offsets = [0.0, 0.04, 0.08, 1.5]
    paths = step_sim.write_inputs(tmp_path, offsets, INPUTS, "name: sim-encoder\n")
    workload = from_trace(
        paths["arrivals"], rate_scale=1.0, tiers=["interactive"], max_input_tokens=512, seed=1
    )
    assert workload.tiers["interactive"].times.tolist() == pytest.approx(offsets)
    command = step_sim.sim_command(paths, INPUTS)
    assert command.startswith("inferbus sim --policy slo --trace ")
    for flag in ("--handover-pause-s 0.3", "--slo-ms 1000", "--interval-s 2", "--partitions 12"):
        assert flag in command
    assert '"scale_down_window_s": 30.0' in paths["policy"].read_text()


def test_latency_breakdown_splits_e2e_into_ingest_queue_and_worker() -> None:
    sent = [("a", 1.0), ("b", 6.0), ("c", 7.0), ("late", 99.0)]
    # "a": on the topic 20 ms after it was sent, read 30 ms later, e2e 100 ms.
    landed = {"a": Landed(0, 0, ORIGIN + 1.02), "b": Landed(0, 1, ORIGIN + 6.5)}
    times = {"a": (100.0, 30.0), "b": (900.0, 100.0), "c": (None, None)}
    out = latency_breakdown(sent, times, landed, ORIGIN, [("before", 0, 5), ("step", 5, 10)])
    assert out["before"]["ingest"]["p50_ms"] == pytest.approx(20.0)
    assert out["before"]["queue"] == {"p50_ms": 30.0, "p99_ms": 30.0}
    assert out["before"]["worker"]["p99_ms"] == pytest.approx(50.0)
    assert out["step"]["ingest"]["p50_ms"] == pytest.approx(500.0)
    assert out["step"]["worker"]["p50_ms"] == pytest.approx(300.0)


def test_other_processes_are_ranked_by_the_cores_they_took_per_phase() -> None:
    others = [
        (ORIGIN + 5, 5.0, [("pytest", 4.0), ("make", 1.0)]),
        (ORIGIN + 10, 5.0, [("pytest", 2.0)]),
        (ORIGIN + 15, 5.0, [("cc", 5.0)]),
    ]
    out = others_by_phase(others, [("step", 0, 10), ("after", 10, 20)], ORIGIN)
    assert out["step"] == [("pytest", 0.6), ("make", 0.1)]
    assert out["after"] == [("cc", 0.5)]

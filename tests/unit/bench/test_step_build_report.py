"""`build_report` and `compare_with_sim` on a small recorded run, made up by hand.

The schedule: 2 req/s for 1 s, 4 req/s for 1 s, 2 req/s for 1 s (no kill phase): eight
requests sent at 0, 0.5 | 1, 1.25, 1.5, 1.75 | 2, 2.5 s. Worker w1 owns partitions 0 and
1 from before the start; w2 joins at 1.2 s, w1 releases partition 1 at 1.3 s and w2
acquires it at 1.5 s (0.3 s after the join), so the run measures a handover pause; w2 was
first seen spawned at -0.8 s and is ready at 1.2 s (2.0 s spawn to ready).
"""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from schemas.telemetry import InstanceRecord, InstanceState
from services.bench.step_build import (
    ASSUMED_HANDOVER_PAUSE_S,
    ASSUMED_TIME_TO_READY_S,
    build_report,
)
from services.bench.step_plot import plot_scale_step
from services.bench.step_report import handover_lines
from services.bench.step_schedule import ScaleStepOptions, send_times

START_WALL = 1_700_000_000.0
TOPIC = "inferbus.req.sim-encoder.interactive"
OPTIONS = ScaleStepOptions(
    low_rps=2.0, high_rps=4.0, before_s=1.0, step_s=1.0, after_s=1.0, kill_s=0.0
)
E2E_MS = 40.0
SENT: list[tuple[str, float]] = [(f"r{i}", t) for i, t in enumerate(send_times(OPTIONS.schedule()))]
STEP_REQUEST = "r3"  # sent at 1.25 s, in the step
W2_PID = 102


def _at(t: float) -> datetime:
    return datetime.fromtimestamp(START_WALL + t, UTC)


def _record(
    instance: str, t: float, owned: list[int], state: InstanceState = "ready", **extra: Any
) -> dict[str, Any]:
    """A registry record as the watcher keeps it (`model_dump(mode="json")`)."""
    return InstanceRecord(
        instance_id=instance,
        model=OPTIONS.model,
        tiers=["interactive"],
        group="g",
        state=state,
        started_at=_at(t),
        updated_at=_at(t),
        owned={TOPIC: owned},
        **extra,
    ).model_dump(mode="json")


def _w1_from_before_the_start() -> list[dict[str, Any]]:
    return [_record("w1", -10.0, [0, 1], pid=101, time_to_ready_s=1.0, ready_at=_at(-10.0))]


def _w2_ready(time_to_ready_s: float | None = 2.5) -> dict[str, Any]:
    return _record("w2", 1.2, [], pid=W2_PID, time_to_ready_s=time_to_ready_s, ready_at=_at(1.2))


def _registry_with_a_handover() -> list[dict[str, Any]]:
    return [
        *_w1_from_before_the_start(),
        _w2_ready(),
        _record("w1", 1.3, [0], pid=101),
        _record("w2", 1.5, [1], pid=W2_PID),
    ]


def _raw(**over: Any) -> dict[str, Any]:
    """A run in which every request is answered ok in 40 ms, as `bench_scale_step` keeps it."""
    raw: dict[str, Any] = {
        "start_wall": START_WALL,
        "lease_s": 6.0,
        "topic": TOPIC,
        "partitions": 2,
        "tier_topic_repeats": 0,
        "invalid_registry_records": 0,
        "model_yaml": "name: sim-encoder\n",
        "log_dir": None,
        "ticks": [],
        "sent": [[i, t] for i, t in SENT],
        # status, e2e_ms, received_t, worker, queue_ms
        "replies": {i: ["ok", E2E_MS, round(t + 0.05, 4), "w1", 5.0] for i, t in SENT},
        "replies_columns": ["status", "e2e_ms", "received_t", "worker", "queue_ms"],
        "repeats": {},
        # partition, offset, epoch s on the tier topic
        "landed": {i: [n % 2, n // 2, START_WALL + t + 0.01] for n, (i, t) in enumerate(SENT)},
        "registry": _registry_with_a_handover(),
        "kills": [],
        "workers": [[START_WALL - 1.0, 1], [START_WALL + 1.2, 2]],
        "first_seen": {"101": START_WALL - 20.0, str(W2_PID): START_WALL - 0.8},
        "others": [],
        "unanswered_in_results_log": {},
        "cpu": [],
        "worker_cpu": {},
    }
    raw.update(over)
    return raw


def _attainment(report: dict[str, Any]) -> dict[str, float | None]:
    return {name: row["attainment"] for name, row in report["slo_attainment"].items()}


def test_every_request_answered_ok_within_the_slo() -> None:
    report = build_report(_raw(), OPTIONS)
    assert _attainment(report) == {"before": 1.0, "step": 1.0, "after": 1.0}
    assert report["answers"] == {
        "sent": 8, "ok": 8, "rejected": {}, "missing": 0, "all_answered": True,
    }  # fmt: skip
    assert report["duplicates"]["lost"] == 0
    assert report["duplicates"]["answered_more_than_once"] == 0
    assert report["duplicates"]["answered_twice_after_dedupe"] == 0
    assert report["unanswered"]["count"] == 0
    side = report["sim"]["side_by_side"]
    assert set(side) == {
        "attainment_all", "attainment_before", "attainment_step", "attainment_after",
        "replica_seconds",
    }  # fmt: skip
    for key in ("attainment_all", "attainment_before", "attainment_step", "attainment_after"):
        # 8 requests, one replica serves 50 req/s: the simulator meets the SLO for all.
        assert (side[key]["live"], side[key]["sim"]) == (1.0, 1.0), key
    # Live: 1 worker from 0 to 1.2 s, 2 from 1.2 s to the last send at 2.5 s.
    assert side["replica_seconds"]["live"] == pytest.approx(1 * 1.2 + 2 * 1.3)
    # Sim: one replica from 0 s; the `slo` policy's first tick (interval 2 s) keeps spare
    # capacity and starts a second (capped at the 2 partitions), 0.5 s before the end.
    assert report["sim"]["sim_peak_replicas"] == 2
    assert side["replica_seconds"]["sim"] == pytest.approx(1 * 2.5 + 1 * 0.5)
    assert side["replica_seconds"]["live_over_sim"] == pytest.approx(round(3.8 / 3.0, 3))


def _without_reply(raw: dict[str, Any], request_id: str) -> dict[str, Any]:
    replies = {k: v for k, v in raw["replies"].items() if k != request_id}
    return {**raw, "replies": replies, "unanswered_in_results_log": {request_id: []}}


def _too_slow(raw: dict[str, Any], request_id: str) -> dict[str, Any]:
    replies = dict(raw["replies"])
    replies[request_id] = ["ok", OPTIONS.slo_p99_ms + 1, replies[request_id][2], "w1", 5.0]
    return {**raw, "replies": replies}


@pytest.mark.parametrize(
    ("miss", "request_id", "expected", "unanswered", "ok"),
    [
        # One of the step's four requests is never answered: 3/4 of the step met the SLO.
        pytest.param(
            _without_reply, STEP_REQUEST, {"before": 1.0, "step": 0.75, "after": 1.0}, 1, 7,
            id="no-reply-in-the-step",
        ),
        # One of the two before the step: 1/2.
        pytest.param(
            _without_reply, "r0", {"before": 0.5, "step": 1.0, "after": 1.0}, 1, 7,
            id="no-reply-before",
        ),
        # Answered ok, but 1 ms over the SLO: a miss, and not unanswered.
        pytest.param(
            _too_slow, STEP_REQUEST, {"before": 1.0, "step": 0.75, "after": 1.0}, 0, 8,
            id="answered-over-the-slo",
        ),
    ],
)  # fmt: skip
def test_a_missed_request_lowers_the_attainment_of_its_phase(
    miss: Any, request_id: str, expected: dict[str, float], unanswered: int, ok: int
) -> None:
    report = build_report(miss(_raw(), request_id), OPTIONS)
    assert _attainment(report) == expected
    assert report["answers"]["ok"] == ok
    assert report["answers"]["missing"] == unanswered
    assert report["duplicates"]["lost"] == unanswered
    assert report["unanswered"]["count"] == unanswered
    assert report["unanswered"]["no_result_in_log"] == ([request_id] if unanswered else [])
    assert report["slo_attainment"]["step"]["within_slo"] == round(4 * expected["step"])
    # All eight requests over 2.5 s: 7 of 8 met the SLO.
    assert report["sim"]["side_by_side"]["attainment_all"]["live"] == 0.875


def test_analysing_the_saved_raw_again_gives_the_same_targets() -> None:
    raw = _without_reply(_raw(), STEP_REQUEST)
    kept = copy.deepcopy(raw)
    first = build_report(raw, OPTIONS)
    assert raw == kept  # the report's "raw" is what was recorded, untouched
    # As `--from-json` does: the saved report's "raw", through JSON, analysed again.
    again = build_report(json.loads(json.dumps(first["raw"])), OPTIONS)
    assert again["targets"] == first["targets"]
    by_measure = {row["measure"]: row for row in first["targets"]}
    assert by_measure["attainment during the step"]["value"] == 0.75
    assert by_measure["attainment during the step"]["met"] is False
    assert by_measure["lost"]["value"] == 1
    assert again["slo_attainment"] == first["slo_attainment"]
    assert again["sim"]["side_by_side"] == first["sim"]["side_by_side"]


NO_READY = f"time_to_ready_s={ASSUMED_TIME_TO_READY_S}: no worker became ready during the run"
NO_MOVE = (
    f"handover_pause_s={ASSUMED_HANDOVER_PAUSE_S}: "
    "no partition moved to another worker during the run"
)
NEVER_ACQUIRED = (
    f"handover_pause_s={ASSUMED_HANDOVER_PAUSE_S}: "
    "none of the 1 moved partitions was acquired by a new owner"
)


@pytest.mark.parametrize(
    ("registry", "first_seen", "inputs", "assumed"),
    [
        pytest.param(
            _registry_with_a_handover(), None, (2.0, 0.3), [],
            id="both-measured",  # spawned at -0.8 s, ready at 1.2 s; acquired 0.3 s after the join
        ),
        pytest.param(
            _registry_with_a_handover(), {}, (2.5, 0.3), [],
            id="spawn-unseen-the-worker-says-2.5s",
        ),
        pytest.param(
            _w1_from_before_the_start(), None,
            (ASSUMED_TIME_TO_READY_S, ASSUMED_HANDOVER_PAUSE_S), [NO_READY, NO_MOVE],
            id="nobody-joined",
        ),
        pytest.param(
            [*_w1_from_before_the_start(), _w2_ready()], None,
            (2.0, ASSUMED_HANDOVER_PAUSE_S), [NO_MOVE],
            id="joined-and-took-nothing",
        ),
        pytest.param(
            [*_w1_from_before_the_start(), _w2_ready(), _record("w1", 1.3, [0], pid=101)], None,
            (2.0, ASSUMED_HANDOVER_PAUSE_S), [NEVER_ACQUIRED],
            id="released-and-never-acquired",
        ),
        pytest.param(
            [*_w1_from_before_the_start(), _w2_ready(time_to_ready_s=None),
             _record("w1", 1.3, [0], pid=101), _record("w2", 1.5, [1], pid=W2_PID)],
            {}, (ASSUMED_TIME_TO_READY_S, 0.3), [NO_READY],
            id="ready-time-unknown",
        ),
    ],
)  # fmt: skip
def test_the_simulator_says_which_inputs_it_assumed(
    registry: list[dict[str, Any]],
    first_seen: dict[str, float] | None,
    inputs: tuple[float, float],
    assumed: list[str],
) -> None:
    over: dict[str, Any] = {"registry": registry}
    if first_seen is not None:
        over["first_seen"] = first_seen
    sim = build_report(_raw(**over), OPTIONS)["sim"]
    assert (sim["inputs"]["time_to_ready_s"], sim["inputs"]["handover_pause_s"]) == inputs
    assert sim["assumed"] == assumed


def test_the_printed_summary_names_the_assumptions_only_when_there_are_some() -> None:
    measured = build_report(_raw(), OPTIONS)
    assert not any("sim assumed" in line for line in handover_lines(measured))
    unmeasured = build_report(_raw(registry=_w1_from_before_the_start()), OPTIONS)
    assert f"sim assumed (not measured in this run): {NO_READY}; {NO_MOVE}" in handover_lines(
        unmeasured
    )


def test_a_built_report_plots(tmp_path: Path) -> None:
    """The plot reads only the report (a report loaded back from JSON plots the same)."""
    report = json.loads(json.dumps(build_report(_without_reply(_raw(), STEP_REQUEST), OPTIONS)))
    out = tmp_path / "step.png"
    plot_scale_step(report, out)
    assert out.read_bytes().startswith(b"\x89PNG")

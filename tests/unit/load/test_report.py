"""Reports built from synthetic runs: the scenario checks pass and fail where they should."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from scaler.sim.workload import Workload, read_trace
from services.load.checks import checks_for
from services.load.ledger import Ledger, Sent
from services.load.observe import DecisionPoint, ReplicaSample
from services.load.plot import plot_report
from services.load.predict import budget_granted, predict, sim_inputs
from services.load.report import build_report, focus_phase, longest_stretch, write_arrivals_csv
from services.load.run import _scenario_fields
from services.load.scenarios import SCENARIOS, rate_workload, scenario_workload
from services.models.demo import encoder_config

Answer = Callable[[str, float, int], tuple[float, str, dict[str, float]]]
"""(tier, sent at, tokens) -> (latency s, status, timings)."""


def timings(e2e_ms: float, engine_ms: float = 5.0, wait_ms: float = 2.0) -> dict[str, float]:
    return {
        "ingest_ms": 0.3, "queue_ms": wait_ms / 2, "batch_wait_ms": wait_ms / 2,
        "preprocess_ms": 0.0, "infer_ms": engine_ms, "postprocess_ms": 0.0, "e2e_ms": e2e_ms,
    }  # fmt: skip


def fast(tier: str, t: float, tokens: int) -> tuple[float, str, dict[str, float]]:
    return 0.03, "ok", timings(30)


def synthetic(workload: Workload, answer: Answer, *, skip: int = 0) -> Ledger:
    """A ledger as if the stack answered each request as `answer` says (the first `skip`
    requests of each tier never answered)."""
    ledger = Ledger()
    for tier, arrivals in workload.tiers.items():
        for i, (t, n) in enumerate(zip(arrivals.times, arrivals.tokens, strict=True)):
            request_id = f"{tier[:1]}{i:031d}"
            ledger.on_sent(Sent(request_id, tier, float(t), float(t) + 20, int(n)))
            if i < skip:
                continue
            delay, status, times = answer(tier, float(t), int(n))
            ledger.on_result(request_id, float(t) + delay, status, times, batch_size=4)
    return ledger


def decision(t: float, current: int, desired: int, *, ready: int, lag: int = 0,
             diagnosis: str = "backlog", tier: str = "interactive") -> DecisionPoint:  # fmt: skip
    return DecisionPoint(
        t, f"inferbus.workers.demo-encoder.{tier}", tier, current, desired, desired != current,
        diagnosis, f"{tier} {current}→{desired}", lag, 100.0, ready, desired, None, None, None,
        None,
    )  # fmt: skip


def report_of(
    name: str,
    answer: Answer = fast,
    *,
    decisions: tuple[DecisionPoint, ...] = (),
    replicas: tuple[ReplicaSample, ...] = (),
    skip: int = 0,
    with_prediction: bool = False,
) -> dict[str, Any]:
    workload = scenario_workload(name, seed=1)
    ledger = synthetic(workload, answer, skip=skip)
    config = encoder_config()
    prediction = None
    if with_prediction:
        inputs = sim_inputs(config, time_to_ready_s=5.0, initial_replicas=1, partitions=12)
        focus = focus_phase(workload, SCENARIOS[name].focus_phase)
        prediction = predict(workload, config, inputs, focus=focus)
    return build_report(
        workload=workload, scenario=_scenario_fields(SCENARIOS[name]), config=config,
        ledger=ledger, ended_s=workload.duration_s + 1, grace_s=10.0, decisions=decisions,
        replicas=replicas, prediction=prediction, context={"bootstrap": "test"},
    )  # fmt: skip


def verdicts(report: dict[str, Any]) -> dict[str, bool | None]:
    return {c["name"]: c["ok"] for c in report["checks"]}


def test_bulk_repeats_fail_a_run() -> None:
    report = report_of("mixed")
    assert verdicts(report)["few repeated results (at-least-once redelivery)"] is True
    sent = report["totals"]["sent"]
    report["totals"]["duplicates"] = sent  # every result came twice
    [repeats] = [c for c in checks_for(report) if c.name.startswith("few repeated")]
    assert repeats.ok is False and f"{sent} repeats for {sent} requests" in repeats.detail


def test_nothing_lost_fails_on_a_missing_answer() -> None:
    good, bad = report_of("mixed"), report_of("mixed", skip=1)
    assert verdicts(good)["nothing lost"] is True
    assert verdicts(bad)["nothing lost"] is False
    assert bad["totals"]["lost"] == 2
    assert bad["lost_request_ids"] == ["i" + "0" * 31, "b" + "0" * 31]
    assert bad["lost_request_ids_left_out"] == 0


def test_the_lost_ids_listed_say_how_many_were_left_out() -> None:
    report = report_of("mixed", skip=40)  # 40 per tier, two tiers
    assert report["totals"]["lost"] == 80
    assert len(report["lost_request_ids"]) == 50
    assert report["lost_request_ids_left_out"] == 30


def answered(status: str) -> Answer:
    def answer(tier: str, t: float, n: int) -> tuple[float, str, dict[str, float]]:
        return 0.03, status, timings(30)

    return answer


def some(status: str, every: int = 10) -> Answer:
    """`status` for one request in `every` (by send time), ok for the rest."""

    def answer(tier: str, t: float, n: int) -> tuple[float, str, dict[str, float]]:
        return 0.03, status if int(t * 100) % every == 0 else "ok", timings(30)

    return answer


ERRORS = "no request answered with an error (other than shedding)"


@pytest.mark.parametrize(
    ("answer", "expected", "in_detail"),
    [
        (fast, True, "none of"),
        (answered("invalid_input"), False, "invalid_input"),
        (some("internal_error"), False, "internal_error"),
        (some("model_not_found"), False, "model_not_found"),
        (some("unauthorized"), False, "unauthorized"),
        (answered("rejected_overload"), True, "none of"),
        (some("deadline_exceeded"), True, "none of"),
    ],
    ids=["all-ok", "all-invalid", "some-internal", "some-no-model", "some-unauthorized",
         "all-shed", "some-expired"],
)  # fmt: skip
def test_errors_fail_a_run_and_shedding_does_not(
    answer: Answer, expected: bool, in_detail: str
) -> None:
    """A run whose every request was answered invalid_input used to pass all its checks."""
    report = report_of("mixed", answer)
    [check] = [c for c in report["checks"] if c["name"] == ERRORS]
    assert check["ok"] is expected
    assert in_detail in check["detail"]
    [shed] = [c for c in report["checks"] if c["name"].startswith("shed under overload")]
    assert shed["ok"] is None and "rejected_overload" in shed["detail"]


def test_a_send_the_broker_refused_fails_the_run() -> None:
    workload = rate_workload(10, 2, ["interactive"], tokens=8, seed=1)
    ledger = synthetic(workload, fast)
    first = next(iter(ledger.sent))
    ledger.answered.pop(first)
    ledger.on_send_failed(first, "KafkaTimeoutError()", 0.1)
    report = build_report(
        workload=workload, scenario=None, config=encoder_config(), ledger=ledger, ended_s=3,
        grace_s=10, decisions=(), replicas=(), prediction=None, context={},
    )  # fmt: skip
    assert verdicts(report)[ERRORS] is False
    [check] = [c for c in report["checks"] if c["name"] == ERRORS]
    assert "not_sent 1" in check["detail"] and "KafkaTimeoutError()" in check["detail"]


def test_an_interrupted_run_reports_pending_apart_from_lost() -> None:
    """Ctrl-C at 4 s of 10: what was sent in its last seconds is pending, not lost; the
    schedule's remainder is not a failed send; the scenario's checks are not run."""
    workload = scenario_workload("mixed", seed=1)
    ledger = Ledger()
    for tier, arrivals in workload.tiers.items():
        for i, t in enumerate(arrivals.times[arrivals.times < 4.0]):
            request_id = f"{tier[:1]}{i:031d}"
            ledger.on_sent(Sent(request_id, tier, float(t), float(t) + 20, 16))
            if t < 3.0:
                ledger.on_result(request_id, float(t) + 0.05, "ok", timings(50))
    report = build_report(
        workload=workload, scenario=_scenario_fields(SCENARIOS["mixed"]), config=encoder_config(),
        ledger=ledger, ended_s=6.0, grace_s=10.0, decisions=(), replicas=(), prediction=None,
        context={}, interrupted_at_s=4.0,
    )  # fmt: skip
    totals = report["totals"]
    assert report["interrupted_at_s"] == 4.0
    assert totals["lost"] == 0 and totals["pending"] == totals["sent"] - totals["answered"] > 0
    got = verdicts(report)
    assert got["nothing lost"] is True and got["sent as scheduled"] is None
    assert got["ran its course"] is False
    assert "batch doubles" not in got  # the scenario's shape needs the whole schedule
    assert "still pending when it stopped" in report["checks"][0]["detail"]


Answered = tuple[float, str, dict[str, float]]


def slow_interactive_while_batch_doubles(tier: str, t: float, n: int) -> Answered:
    e2e = 900.0 if tier == "interactive" and 30 <= t < 60 else 40.0
    return e2e / 1000, "ok", timings(e2e)


@pytest.mark.parametrize(
    ("answer", "expected"),
    [(fast, True), (slow_interactive_while_batch_doubles, False)],
    ids=["holds", "breached-while-doubled"],
)
def test_mixed_interactive_slo(answer: Answer, expected: bool) -> None:
    report = report_of("mixed", answer)
    assert verdicts(report)["interactive p99 within its SLO in every phase"] is expected
    assert verdicts(report)["batch doubles"] is True
    assert report["tiers"]["batch"]["phases"]["batch-x2"]["sent"] > 500


def engine_grows(tier: str, t: float, n: int) -> tuple[float, str, dict[str, float]]:
    engine = n * 0.3
    return (engine + 5) / 1000, "ok", timings(engine + 5, engine_ms=engine)


def queue_grows(tier: str, t: float, n: int) -> tuple[float, str, dict[str, float]]:
    wait = 3000.0 if 15 <= t < 75 else 2.0
    return (wait + 5) / 1000, "ok", timings(wait + 5, engine_ms=5, wait_ms=wait)


ENGINE, WAIT, SLO = (
    "engine time rises several-fold with long inputs",
    "waiting (queue + batch wait) stays a small share of e2e with long inputs",
    "interactive p99 within its SLO with long inputs",
)


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (engine_grows, {ENGINE: True, WAIT: True, SLO: True}),
        (queue_grows, {ENGINE: False, WAIT: False, SLO: False}),
    ],
    ids=["engine-bound", "backlog"],
)
def test_long_context_checks(answer: Answer, expected: dict[str, bool]) -> None:
    got = verdicts(report_of("long-context", answer))
    assert {k: got[k] for k in expected} == expected
    engine_up = decision(30, 1, 2, ready=1, diagnosis="engine_bound")
    got = verdicts(report_of("long-context", answer, decisions=(engine_up,)))
    assert got["no scale-out on an engine-bound diagnosis"] is False


class BurstQueue:
    """A FIFO server doing 150/s until t=40 s and 400/s after (the scale-out landed): a queue
    builds from the burst's start (20 s, 240/s) until 40 s, then drains."""

    def __init__(self) -> None:
        self.free_at = 0.0

    def __call__(self, tier: str, t: float, n: int) -> tuple[float, str, dict[str, float]]:
        capacity = 150.0 if self.free_at < 40 else 400.0
        self.free_at = max(t, self.free_at) + 1 / capacity
        delay = self.free_at - t
        return delay, "ok", timings(delay * 1000)


def test_burst_reports_live_and_simulated_backlog() -> None:
    up = decision(25, 1, 3, ready=1, lag=800)
    ready = decision(40, 3, 3, ready=3, lag=1500)
    report = report_of("burst", BurstQueue(), decisions=(up, ready), with_prediction=True)
    checks = {c["name"]: c for c in report["checks"]}
    live = report["backlog"]["interactive"]["focus"]
    assert live is not None and 15 <= live["grew_for_s"] <= 21
    assert live["drained_after_s"] is not None
    side_by_side = checks["time until the backlog stops growing: live vs simulator"]
    assert side_by_side["ok"] is None
    assert "scale-out at t=25s, 3 consuming at t=40s; new replicas" in side_by_side["detail"]
    assert (
        "simulator grew for" in side_by_side["detail"]
        or "simulator no backlog" in side_by_side["detail"]
    )
    assert checks["the scaler scales out during the burst"]["ok"] is True
    assert checks["the backlog drains after the burst"]["ok"] is True
    sim = report["prediction"]["tiers"]["interactive"]
    assert sim["unserved"] == 0 and len(sim["backlog"]["t"]) == len(sim["backlog"]["requests"])


def test_warmup_checks_need_a_scale_out_and_warming_replicas() -> None:
    group = "inferbus.workers.demo-encoder.interactive"
    samples = tuple(
        ReplicaSample(float(t), group, {"loading": int(20 <= t < 24), "warming": int(24 <= t < 28),
                                        "joining": 0, "ready": 1 + int(t >= 28), "draining": 0})
        for t in range(0, 90)
    )  # fmt: skip
    report = report_of("warmup", decisions=(decision(19, 1, 2, ready=1),), replicas=samples)
    assert verdicts(report)["the scaler scales out during the ramp"] is True
    assert verdicts(report)["new replicas seen loading or warming"] is True
    bare = report_of("warmup")
    assert verdicts(bare)["the scaler scales out during the ramp"] is False
    assert verdicts(bare)["new replicas seen loading or warming"] is False
    at_max = report_of("warmup", decisions=(decision(10, 1, 12, ready=1),))
    [check] = [c for c in at_max["checks"] if c["name"] == "the scaler scales out during the ramp"]
    assert check["ok"] is True and "already at replicas.max 12" in check["detail"]


def test_plot_and_arrivals_files(tmp_path: Path) -> None:
    report = report_of("burst", BurstQueue(), decisions=(decision(25, 1, 3, ready=1),),
                       with_prediction=True)  # fmt: skip
    plot_report(report, tmp_path / "timeline.png")
    assert (tmp_path / "timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    [csv] = write_arrivals_csv(scenario_workload("burst", seed=1), tmp_path)
    times, tokens = read_trace(csv)
    workload = scenario_workload("burst", seed=1).tiers["interactive"]
    assert times.size == workload.times.size
    assert times[-1] == pytest.approx(workload.times[-1] - workload.times[0], abs=1e-5)
    assert tokens.tolist() == workload.tokens.tolist()


def test_a_prediction_takes_seconds_not_minutes() -> None:
    started = time.perf_counter()
    report_of("warmup", with_prediction=True)
    assert time.perf_counter() - started < 20


@pytest.mark.parametrize(
    ("joining", "expected"),
    [([0, 1, 1, 1, 0, 1, 0], 2.0), ([0, 0, 0], 0.0), ([1, 1], 1.0)],
    ids=["longest-of-two", "never", "to-the-end"],
)
def test_longest_joining_stretch(joining: list[int], expected: float) -> None:
    group = "g"
    samples = [
        ReplicaSample(float(t), group, {"joining": n, "ready": 1}) for t, n in enumerate(joining)
    ]
    samples.append(ReplicaSample(0.0, "other", {"joining": 1}))
    assert longest_stretch(samples, group, "joining") == expected


@pytest.mark.parametrize(
    ("decisions", "verdict"),
    [
        pytest.param((), False, id="no-scale-up"),
        pytest.param((decision(12, 1, 2, ready=1, diagnosis="budget_capped"),), None, id="capped"),
        pytest.param((decision(12, 1, 2, ready=1),), False, id="scaled-before-not-capped"),
    ],
)
def test_a_scale_out_the_replica_budget_held_back_is_not_judged(
    decisions: tuple[DecisionPoint, ...], verdict: bool | None
) -> None:
    """Plain `make up` on 2 cores may add one worker in all: spent at 12 s, before the burst,
    the burst's check read `no scale-up` as if the scaler had not reacted."""
    report = report_of("burst", BurstQueue(), decisions=decisions)
    [check] = [c for c in report["checks"] if c["name"] == "the scaler scales out during the burst"]
    assert check["ok"] is verdict
    if verdict is None:
        assert "not judged: the stack's replica budget was spent" in check["detail"]
        assert "INFERBUS_SCALER_MAX_TOTAL_REPLICAS" in check["detail"]


@pytest.mark.parametrize(
    ("diagnoses", "cap", "max_replicas", "source"),
    [
        pytest.param((), None, 12, "model.yaml", id="never-capped"),
        pytest.param(
            ("backlog", "budget_capped", "budget_capped"),
            2,
            2,
            "the live stack's replica budget",
            id="capped-at-2",
        ),
        pytest.param(("budget_capped",), 20, 12, "model.yaml", id="cap-above-model-max"),
    ],
)
def test_the_prediction_gets_no_more_replicas_than_the_live_budget_granted(
    diagnoses: tuple[str, ...], cap: int | None, max_replicas: int, source: str
) -> None:
    """Regression: the prediction gave the group model.yaml's 12 replicas where the live
    stack's budget (plain `make up` on 2 cores) granted it 2."""
    points = [
        decision(5.0 * i, 1, (cap or 3) if d == "budget_capped" else i + 1, ready=1, diagnosis=d)
        for i, d in enumerate(diagnoses)
    ]
    other = decision(0.0, 1, 50, ready=1, diagnosis="budget_capped", tier="batch")
    granted = budget_granted([*points, other], "inferbus.workers.demo-encoder.interactive")
    assert granted == cap
    inputs = sim_inputs(
        encoder_config(), time_to_ready_s=5.0, initial_replicas=1, partitions=12, budget_cap=granted
    )
    assert (inputs.max_replicas, inputs.max_replicas_from) == (max_replicas, source)

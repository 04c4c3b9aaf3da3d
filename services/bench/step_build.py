"""The scale-step report from what a run recorded (pure): a saved report's `raw` part builds
it again (`--from-json`), and the simulator replays the same arrivals beside it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from infra.cores import usable_cores
from infra.models.config import EngineConfig, ModelConfig, ReplicaBounds, SimConfig, TierSlo
from schemas.telemetry import InstanceRecord
from services.bench import step_sim
from services.bench.handover import Kill, duplicates, handover_report, stalls
from services.bench.step_analysis import Answer, Tick, analyze, attainment
from services.bench.step_report import (
    Landed,
    Reply,
    cpu_by_phase,
    latency_breakdown,
    others_by_phase,
    owner_records,
    served_records,
    targets,
    time_to_ready,
    worker_cores,
)
from services.bench.step_schedule import Phase, ScaleStepOptions, phase_bounds
from services.bench.step_sim import StepSimInputs
from services.models.demo import encoder_config

STALL_KEPT_S = 0.1
"""Stalls at least this long are kept in the report (for the plot)."""

ASSUMED_TIME_TO_READY_S = 3.0
"""Start to ready (s) the simulator takes when no worker became ready during the run."""
ASSUMED_HANDOVER_PAUSE_S = 1.0
"""Handover pause (s) the simulator takes when no moved partition was acquired by its new
owner during the run."""


def sim_model_config(options: ScaleStepOptions) -> ModelConfig:
    """demo-encoder's interface with the `sim` engine, small batches, one tier."""
    base = encoder_config()
    return base.model_copy(
        update={
            "name": options.model,
            "description": "Load-step benchmark: demo-encoder's inputs, simulated engine time.",
            "tokenizer": None,
            "batching": base.batching.model_copy(
                update={"max_batch_size": options.max_batch_size, "length_buckets": []}
            ),
            "engine": EngineConfig(
                kind="sim",
                sim=SimConfig(a_ms=options.a_ms, b_ms=options.b_ms, per="sample"),
            ),
            "slo": {"interactive": TierSlo(p99_e2e_ms=options.slo_p99_ms)},
            "replicas": ReplicaBounds(
                min=options.min_replicas, max=options.max_replicas, warm=options.min_replicas
            ),
            "warmup": base.warmup.model_copy(update={"batch_sizes": [1], "sequence_lengths": []}),
            "tiers": ["interactive"],
        }
    )


def build_report(raw: dict[str, Any], options: ScaleStepOptions) -> dict[str, Any]:
    """The report from what a run recorded (`raw`, kept in the report: a saved report can
    be analysed again with `--from-json`)."""
    phases = options.schedule()
    bounds_list = phase_bounds(phases)
    start_wall = raw["start_wall"]
    ticks = [Tick(**t) for t in raw["ticks"]]
    replies_raw: dict[str, list[Any]] = raw["replies"]
    answers = []
    for request_id, sent_t in raw["sent"]:
        got = replies_raw.get(request_id)
        answers.append(
            Answer(
                sent_t=sent_t,
                status=got[0] if got else None,
                e2e_ms=got[1] if got else None,
                roundtrip_ms=round((got[2] - sent_t) * 1000, 2) if got else None,
            )
        )
    ids = [request_id for request_id, _ in raw["sent"]]
    replies = {k: Reply(v[0], v[3], v[4]) for k, v in replies_raw.items()}
    landed = {k: Landed(*v) for k, v in raw["landed"].items()}
    registry = [InstanceRecord.model_validate(r) for r in raw["registry"]]
    kills = [Kill(**k) for k in raw["kills"]]
    served, unseen = served_records(ids, replies, landed, start_wall)
    owners = owner_records(registry, raw["topic"], start_wall)
    end_t = max(
        (a.sent_t + (a.roundtrip_ms or 0) / 1000 for a in answers), default=bounds_list[-1][2]
    )
    found = stalls(served, end_t)
    handover = handover_report(
        served,
        owners,
        stalled=found,
        partitions=raw["partitions"],
        end_t=end_t,
        kills=kills,
        lease_s=raw["lease_s"],
        phases=bounds_list,
        from_t=0.0,
    )
    handover["unseen_on_tier_topic"] = unseen
    handover["tier_topic_repeats"] = raw["tier_topic_repeats"]
    unanswered: dict[str, list[list[int]]] = raw.get("unanswered_in_results_log", {})
    repeats: dict[str, list[str]] = raw["repeats"]
    statuses = {i: [replies[i].status, *repeats.get(i, [])] for i in ids if i in replies}
    high = [(lo, hi) for name, lo, hi in bounds_list if name in ("step", "kill")]
    report: dict[str, Any] = {
        "benchmark": "scale-step",
        "cores": usable_cores(),
        "options": asdict(options),
        "schedule": [asdict(p) for p in phases],
        "capacity_rps_per_replica": {
            "batch_1": round(options.capacity_rps(1), 1),
            f"batch_{options.max_batch_size}": round(
                options.capacity_rps(options.max_batch_size), 1
            ),
        },
        "policy": "slo",
        "partitions": raw["partitions"],
        "worker_lease_s": raw["lease_s"],
        **analyze(ticks, answers, options),
        "duplicates": duplicates(statuses, ids),
        "unanswered": {
            "count": len(unanswered),
            "result_in_log_client_missed_it": sorted(i for i, at in unanswered.items() if at),
            "no_result_in_log": sorted(i for i, at in unanswered.items() if not at),
            "where": {
                i: {"results": at, "tier": raw["landed"].get(i)} for i, at in unanswered.items()
            },
        },
        "handover": handover,
        "time_to_ready": time_to_ready(
            registry,
            start_wall - options.before_s,
            {int(k): v for k, v in raw.get("first_seen", {}).items()},
        ),
        "cpu_cores_busy": cpu_by_phase(raw["cpu"], bounds_list, start_wall),
        "other_processes_cores": others_by_phase(raw.get("others", []), bounds_list, start_wall),
        "latency_breakdown": latency_breakdown(
            raw["sent"],
            {k: (v[1], v[4]) for k, v in replies_raw.items()},
            landed,
            start_wall,
            bounds_list,
        ),
        "worker_cores_in_high_load": worker_cores(
            {int(k): v for k, v in raw["worker_cpu"].items()},
            start_wall + high[0][0],
            start_wall + high[-1][1],
        ),
        "logs": raw["log_dir"],
        "ticks": raw["ticks"],
        "workers_over_time": [[round(t - start_wall, 2), n] for t, n in raw["workers"]],
        "stalls": [
            [p, round(x.start_t, 3), round(x.end_t, 3)]
            for p, found_p in found.items()
            for x in found_p
            if x.duration_s >= STALL_KEPT_S
        ],
        "stalls_columns": ["partition", "start_t", "end_t"],
        "requests": [[a.sent_t, a.status, a.e2e_ms, a.roundtrip_ms] for a in answers],
        "requests_columns": ["sent_t", "status", "e2e_ms", "roundtrip_ms"],
    }
    offsets = [t for _, t in raw["sent"]]
    report["sim"] = compare_with_sim(report, options, offsets, raw["model_yaml"])
    report["targets"] = targets(report)
    report["raw"] = raw
    return report


def measured_or_assumed(report: dict[str, Any]) -> tuple[float, float, list[str]]:
    """The time-to-ready and handover pause the simulator takes from the live run, and one
    note per input the run did not measure: the value assumed instead and why."""
    assumed: list[str] = []
    time_to_ready_s = _measured_time_to_ready(report["time_to_ready"])
    if time_to_ready_s is None:
        time_to_ready_s = ASSUMED_TIME_TO_READY_S
        assumed.append(f"time_to_ready_s={time_to_ready_s}: no worker became ready during the run")
    moved = report["handover"]["moved"]
    # From the change to the new owner's acquisition: traffic-independent (the stall
    # measure sees only pauses that records waited through).
    handover_pause_s = moved["median_acquired_s"]
    if handover_pause_s is None:
        handover_pause_s = ASSUMED_HANDOVER_PAUSE_S
        assumed.append(f"handover_pause_s={handover_pause_s}: {_why_no_handover(moved)}")
    return time_to_ready_s, handover_pause_s, assumed


def _measured_time_to_ready(time_to_ready: dict[str, Any]) -> float | None:
    """Spawn to ready as the benchmark saw it; else start to ready as the worker said."""
    spawn_to_ready: float | None = time_to_ready["spawn_to_ready_median_s"]
    return spawn_to_ready if spawn_to_ready is not None else time_to_ready["median_s"]


def _why_no_handover(moved: dict[str, Any]) -> str:
    if not moved["count"]:
        return "no partition moved to another worker during the run"
    return f"none of the {moved['count']} moved partitions was acquired by a new owner"


def compare_with_sim(
    report: dict[str, Any], options: ScaleStepOptions, offsets: Sequence[float], model_yaml: str
) -> dict[str, Any]:
    """The simulator on the same arrivals and settings; live and sim side by side."""
    time_to_ready_s, handover_pause_s, assumed = measured_or_assumed(report)
    workers = report["workers_over_time"]
    initial = next((n for t, n in reversed(workers) if t <= 0), options.min_replicas)
    inputs = StepSimInputs(
        a_ms=options.a_ms,
        b_ms=options.b_ms,
        max_batch_size=options.max_batch_size,
        max_queue_delay_ms=sim_model_config(options).batching.max_queue_delay_ms,
        slo_ms=options.slo_p99_ms,
        partitions=report["partitions"],
        time_to_ready_s=time_to_ready_s,
        handover_pause_s=handover_pause_s,
        interval_s=options.interval_s,
        min_replicas=options.min_replicas,
        max_replicas=options.max_replicas,
        initial_replicas=max(initial, options.min_replicas),
        scale_down_window_s=options.scale_down_window_s,
        seq_len=options.seq_len,
    )
    duration = max(offsets)
    simulated = step_sim.run(offsets, duration, inputs)
    phases = options.schedule()
    sim_answers = [
        Answer(t, "ok" if e is not None else None, e, None)
        for t, e in step_sim.outcome_answers(simulated)
    ]
    sim_att = attainment(sim_answers, phases, options.slo_p99_ms)
    live_att = report["slo_attainment"]
    live_answers = [Answer(r[0], r[1], r[2], r[3]) for r in report["requests"]]
    everything = [Phase("all", 0.0, duration + 1e-6)]
    live_all = attainment(live_answers, everything, options.slo_p99_ms)["all"]["attainment"]
    sim_all = attainment(sim_answers, everything, options.slo_p99_ms)["all"]["attainment"]
    live_cost = step_sim.replica_seconds([(t, n) for t, n in workers], 0.0, duration)
    sim_cost = simulated.groups[0].replica_seconds
    live: dict[str, float | None] = {"attainment_all": live_all}
    sim: dict[str, float | None] = {"attainment_all": sim_all}
    for phase in phases:
        live[f"attainment_{phase.name}"] = live_att[phase.name]["attainment"]
        sim[f"attainment_{phase.name}"] = sim_att[phase.name]["attainment"]
    live["replica_seconds"], sim["replica_seconds"] = round(live_cost, 1), round(sim_cost, 1)
    out: dict[str, Any] = {
        "inputs": asdict(inputs),
        "assumed": assumed,
        "side_by_side": step_sim.side_by_side(live, sim),
        "sim_actions": simulated.groups[0].actions,
        "sim_peak_replicas": max((t.replicas for t in simulated.ticks), default=None),
        "sim_decisions": list(simulated.lines),
        "note": "the simulator does not model the kill; it replays the same send times",
    }
    if options.sim_dir is not None:
        paths = step_sim.write_inputs(Path(options.sim_dir), offsets, inputs, model_yaml)
        out["command"] = step_sim.sim_command(paths, inputs)
    return out

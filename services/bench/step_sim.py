"""The simulator on a scale-step run's own arrivals and settings, beside the live run.

Same send times, same service law (the sim engine's a + b·samples, batch bound, queue
delay), same SLO, scaler interval, replica bounds and scale-down window, and the
time-to-ready and handover pause the live run measured. `inferbus sim` replays the same
from the files `write_inputs` leaves next to the report (the printed command).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from scaler.config import PolicyConfig
from scaler.sim.engine import SimRun, simulate
from scaler.sim.params import ServiceModel, SimParams
from scaler.sim.workload import TierArrivals, Workload

TOLERANCE = 0.30
"""Live and simulated attainment and replica-seconds should agree within this share."""


@dataclass(frozen=True)
class StepSimInputs:
    """What the simulation assumes; every field from the live run's options or measurements."""

    a_ms: float
    b_ms: float
    max_batch_size: int
    max_queue_delay_ms: float
    slo_ms: float
    partitions: int
    time_to_ready_s: float
    handover_pause_s: float
    interval_s: float
    min_replicas: int
    max_replicas: int
    initial_replicas: int
    scale_down_window_s: float
    seq_len: int = 32


def step_workload(offsets: Sequence[float], duration_s: float, seq_len: int) -> Workload:
    """The run's send offsets as the interactive tier's arrivals."""
    times = np.asarray(sorted(offsets), dtype=np.float64)
    return Workload(
        name="scale-step",
        source="scale-step send times",
        duration_s=duration_s,
        tiers={"interactive": TierArrivals(times, np.full(times.size, float(seq_len)))},
    )


def sim_params(inputs: StepSimInputs) -> SimParams:
    """The cluster as the live run had it."""
    return SimParams(
        service=ServiceModel(
            a_ms=inputs.a_ms,
            b_ms=inputs.b_ms,
            per="sample",
            max_batch_size=inputs.max_batch_size,
            max_queue_delay_ms=inputs.max_queue_delay_ms,
        ),
        slo_p99_e2e_ms={"critical": inputs.slo_ms, "interactive": inputs.slo_ms, "batch": 60_000},
        time_to_ready_s=inputs.time_to_ready_s,
        handover_pause_s=inputs.handover_pause_s,
        partitions=inputs.partitions,
        min_replicas=inputs.min_replicas,
        warm_replicas=inputs.min_replicas,
        max_replicas=inputs.max_replicas,
        initial_replicas=inputs.initial_replicas,
        max_total_replicas=inputs.max_replicas,
        collection_interval_s=inputs.interval_s,
    )


def policy_overrides(inputs: StepSimInputs) -> dict[str, float | int]:
    """The live scaler's PolicyConfig changes from the defaults."""
    return {
        "scale_down_window_s": inputs.scale_down_window_s,
        "max_total_replicas": inputs.max_replicas,
    }


def run(offsets: Sequence[float], duration_s: float, inputs: StepSimInputs) -> SimRun:
    """The `slo` policy on the step, simulated."""
    workload = step_workload(offsets, duration_s, inputs.seq_len)
    config = PolicyConfig(**policy_overrides(inputs))  # type: ignore[arg-type]
    return simulate(workload, sim_params(inputs), "slo", config)


def outcome_answers(run_: SimRun) -> list[tuple[float, float | None]]:
    """(arrival s, e2e ms or None when never served) of every simulated request."""
    group = run_.groups[0]
    return [
        (float(t), None if np.isnan(e) else float(e) * 1000)
        for t, e in zip(group.arrivals, group.e2e_s, strict=True)
    ]


def replica_seconds(samples: Sequence[tuple[float, int]], start_t: float, end_t: float) -> float:
    """Integral of a worker-count step series (t, count) over [start_t, end_t]."""
    total = 0.0
    ends = [t for t, _ in samples[1:]] + ([end_t] if samples else [])
    for (t, count), t_next in zip(samples, ends, strict=True):
        lo, hi = max(t, start_t), min(t_next, end_t)
        if hi > lo:
            total += count * (hi - lo)
    return total


def _ratio(live: float | None, sim: float | None) -> float | None:
    if live is None or sim is None or sim == 0:
        return None
    return round(live / sim, 3)


def side_by_side(
    live: Mapping[str, float | None], sim: Mapping[str, float | None], tolerance: float = TOLERANCE
) -> dict[str, Any]:
    """Per measure: live, sim, live/sim and whether they agree within `tolerance`."""
    out: dict[str, Any] = {}
    for key in live:
        ratio = _ratio(live[key], sim.get(key))
        out[key] = {
            "live": live[key],
            "sim": sim.get(key),
            "live_over_sim": ratio,
            "within": ratio is not None and abs(ratio - 1) <= tolerance,
        }
    return out


def write_inputs(
    directory: Path, offsets: Sequence[float], inputs: StepSimInputs, model_yaml: str
) -> dict[str, Path]:
    """The arrivals CSV, the model.yaml and the policy JSON `inferbus sim` replays."""
    directory.mkdir(parents=True, exist_ok=True)
    arrivals = directory / "arrivals.csv"
    base = datetime(2000, 1, 1, tzinfo=UTC)
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    for t in sorted(offsets):
        stamp = (base + timedelta(seconds=float(t))).strftime("%Y-%m-%d %H:%M:%S.%f")
        lines.append(f"{stamp},{inputs.seq_len},0")
    arrivals.write_text("\n".join(lines) + "\n")
    model = directory / "model.yaml"
    model.write_text(model_yaml)
    policy = directory / "policy.json"
    policy.write_text(json.dumps(policy_overrides(inputs), indent=2) + "\n")
    (directory / "inputs.json").write_text(json.dumps(asdict(inputs), indent=2) + "\n")
    return {"arrivals": arrivals, "model": model, "policy": policy}


def sim_command(paths: Mapping[str, Path], inputs: StepSimInputs) -> str:
    """The `inferbus sim` line that simulates the same step from the written files."""
    args = [
        "inferbus",
        "sim",
        "--policy",
        "slo",
        "--trace",
        str(paths["arrivals"]),
        "--model-yaml",
        str(paths["model"]),
        "--config",
        str(paths["policy"]),
        "--time-to-ready-s",
        f"{inputs.time_to_ready_s:g}",
        "--handover-pause-s",
        f"{inputs.handover_pause_s:g}",
        "--partitions",
        str(inputs.partitions),
        "--slo-ms",
        f"{inputs.slo_ms:g}",
        "--interval-s",
        f"{inputs.interval_s:g}",
        "--min-replicas",
        str(inputs.min_replicas),
        "--max-replicas",
        str(inputs.max_replicas),
        "--initial-replicas",
        str(inputs.initial_replicas),
        "--max-total-replicas",
        str(inputs.max_replicas),
    ]
    return shlex.join(args)

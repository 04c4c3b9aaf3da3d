"""Compare policies on one workload: per-tier attainment, latency, cost, actions, and the oracle."""

from __future__ import annotations

import dataclasses
import gzip
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from scaler.config import PolicyConfig
from scaler.sim.engine import GroupOutcome, Progress, SimRun, simulate
from scaler.sim.oracle import OracleSchedule, oracle
from scaler.sim.params import SimParams
from scaler.sim.workload import FloatArray, Workload
from schemas.topics import TIERS, Tier


@dataclass(frozen=True)
class TierSummary:
    """One policy's result on one tier."""

    policy: str
    tier: Tier
    requests: int
    unserved: int
    attainment: float
    """Share of requests with e2e within the tier's p99 target (unserved count as misses)."""
    p50_e2e_ms: float
    p99_e2e_ms: float
    replica_seconds: float
    actions: int


@dataclass(frozen=True)
class PhaseCheck:
    """Warm-up check of one ramp: was new capacity ready before the e2e p99 passed the SLO?"""

    tier: Tier
    phase: str
    first_ready_s: float | None
    first_breach_s: float | None
    ok: bool


@dataclass(frozen=True)
class Comparison:
    """Everything `inferbus sim` reports."""

    workload: str
    source: str
    requests: int
    duration_s: float
    params: SimParams
    summaries: tuple[TierSummary, ...]
    oracles: dict[Tier, OracleSchedule]
    runs: tuple[SimRun, ...]
    phase_checks: dict[str, tuple[PhaseCheck, ...]]


def _summary(
    policy: str, *, tier: Tier, slo_ms: float, e2e_s: FloatArray, cost: float, actions: int
) -> TierSummary:
    served = e2e_s[~np.isnan(e2e_s)]
    ok = np.count_nonzero(served <= slo_ms / 1000)
    return TierSummary(
        policy=policy,
        tier=tier,
        requests=int(e2e_s.size),
        unserved=int(e2e_s.size - served.size),
        attainment=float(ok / e2e_s.size) if e2e_s.size else 1.0,
        p50_e2e_ms=1000 * float(np.percentile(served, 50)) if served.size else float("nan"),
        p99_e2e_ms=1000 * float(np.percentile(served, 99)) if served.size else float("nan"),
        replica_seconds=cost,
        actions=actions,
    )


def _phase_checks(run: SimRun, out: GroupOutcome, workload: Workload) -> tuple[PhaseCheck, ...]:
    checks = []
    for phase in workload.phases:
        ready = [r for s, r in out.ready_times if phase.start_s <= s < phase.end_s]
        breach = [
            t.t
            for t in run.ticks
            if t.tier == out.tier
            and phase.start_s <= t.t < phase.end_s
            and t.e2e_p99_ms is not None
            and t.e2e_p99_ms > out.slo_p99_e2e_ms
        ]
        first_ready = min(ready) if ready else None
        first_breach = min(breach) if breach else None
        ok = first_breach is None or (first_ready is not None and first_ready < first_breach)
        checks.append(PhaseCheck(out.tier, phase.name, first_ready, first_breach, ok))
    return tuple(checks)


def compare(
    workload: Workload,
    params: SimParams,
    policies: Sequence[str],
    config: PolicyConfig,
    progress: Progress | None = None,
) -> Comparison:
    """Compute the oracle, then run every policy from the same start.

    The oracle sizes each tier alone and ignores `params.max_total_replicas` (`oracle`); the
    policies run within it (`engine.policy_config`, `engine.initial_counts`)."""
    params.check_span(workload.duration_s)
    tiers = [t for t in TIERS if t in workload.tiers]
    cap = min(params.partitions, params.max_replicas or params.partitions)
    floor = max(params.min_replicas, params.warm_replicas, 1)
    oracles = {
        t: oracle(
            workload.tiers[t],
            params.service,
            params.slo_p99_e2e_ms[t],
            workload.duration_s,
            step_s=params.oracle_step_s,
            floor=floor,
            cap=cap,
            partitions=params.partitions if params.queues == "partition" else None,
        )
        for t in tiers
    }
    runs = []
    for name in policies:
        start = params.initial_replicas
        if start is None:
            start = max(o.replicas[0] for o in oracles.values())
        runs.append(
            simulate(
                workload,
                dataclasses.replace(params, initial_replicas=start),
                name,
                config,
                progress,
            )
        )
    summaries = [
        _summary(
            "oracle",
            tier=t,
            slo_ms=params.slo_p99_e2e_ms[t],
            e2e_s=o.e2e_s,
            cost=o.replica_seconds,
            actions=sum(a != b for a, b in zip(o.replicas, o.replicas[1:], strict=False)),
        )
        for t, o in oracles.items()
    ]
    checks: dict[str, tuple[PhaseCheck, ...]] = {}
    for run in runs:
        for out in run.groups:
            summaries.append(
                _summary(
                    run.policy,
                    tier=out.tier,
                    slo_ms=out.slo_p99_e2e_ms,
                    e2e_s=out.e2e_s,
                    cost=out.replica_seconds,
                    actions=out.actions,
                )
            )
        checks[run.policy] = tuple(
            c for out in run.groups for c in _phase_checks(run, out, workload)
        )
    return Comparison(
        workload=workload.name,
        source=workload.source,
        requests=workload.total(),
        duration_s=workload.duration_s,
        params=params,
        summaries=tuple(summaries),
        oracles=oracles,
        runs=tuple(runs),
        phase_checks=checks,
    )


def to_json(cmp: Comparison) -> dict[str, Any]:
    """JSON-ready report: summaries, oracle schedules, per-tick timelines, phase checks."""
    return {
        "workload": cmp.workload,
        "source": cmp.source,
        "requests": cmp.requests,
        "duration_s": cmp.duration_s,
        "params": dataclasses.asdict(cmp.params),
        "summaries": [dataclasses.asdict(s) for s in cmp.summaries],
        "oracle": {
            t: {"step_s": o.step_s, "replicas": list(o.replicas)} for t, o in cmp.oracles.items()
        },
        "phase_checks": {
            p: [dataclasses.asdict(c) for c in cs] for p, cs in cmp.phase_checks.items()
        },
        "runs": [
            {
                "policy": r.policy,
                "wall_s": r.wall_s,
                "ticks": [dataclasses.asdict(t) for t in r.ticks],
                "decisions": list(r.lines),
            }
            for r in cmp.runs
        ],
    }


def write_json(cmp: Comparison, path: Path) -> None:
    """Write the report (gzipped if the name ends in .gz); NaN becomes null for any reader."""
    text = json.dumps(finite_or_null(to_json(cmp)), indent=1, default=str, allow_nan=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(text.encode(), mtime=0))
    else:
        path.write_text(text)


def finite_or_null(value: Any) -> Any:
    """`value` with every NaN or infinite float inside it as None (JSON has neither)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite_or_null(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite_or_null(v) for v in value]
    return value


def table(cmp: Comparison) -> str:
    """Markdown table of the summaries, oracle first, with cost relative to the oracle."""
    base = {s.tier: s.replica_seconds for s in cmp.summaries if s.policy == "oracle"}
    rows = [
        "| policy | tier | requests | SLO attainment | p50 e2e ms | p99 e2e ms | replica-s "
        "| vs oracle | actions |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in cmp.summaries:
        ratio = s.replica_seconds / base[s.tier] if base.get(s.tier) else float("nan")
        rows.append(
            f"| {s.policy} | {s.tier} | {s.requests} | {s.attainment:.2%} | {s.p50_e2e_ms:.0f} | "
            f"{s.p99_e2e_ms:.0f} | {s.replica_seconds:.0f} | {ratio:.2f} | {s.actions} |"
        )
    return "\n".join(rows)

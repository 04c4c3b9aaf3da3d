"""The simulator's prediction for the very arrivals a run sends (`inferbus sim`'s engine).

The service model is the model's `engine.sim` block (fit it on this machine with
`inferbus models calibrate MODEL`), time-to-ready the one the registry measured, the
starting replicas those ready when the run began. The simulator knows nothing of CPU
shared with the broker and ingest, so on a small machine it predicts more capacity per
added replica than there is: the report shows both, side by side.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from infra.models.config import ModelConfig
from scaler.config import PolicyConfig
from scaler.sim.engine import simulate
from scaler.sim.params import ServiceModel, SimParams
from scaler.sim.workload import Phase, Workload
from schemas.topics import TIERS
from services.load.observe import DecisionPoint
from services.load.timeline import BacklogPeak, backlog, backlog_peak, grid


@dataclass(frozen=True)
class SimInputs:
    """What the prediction assumed, reported with it."""

    a_ms: float
    b_ms: float
    per: str
    max_batch_size: int
    time_to_ready_s: float
    time_to_ready_measured: bool
    initial_replicas: int
    partitions: int
    interval_s: float
    max_replicas: int
    max_replicas_from: str
    """Where `max_replicas` came from: model.yaml, or the live stack's replica budget."""


def budget_granted(decisions: Iterable[DecisionPoint], group: str) -> int | None:
    """The most replicas the live stack's global budget let `group` have, when it held the
    group back (its `budget_capped` decisions are the grants); None when it never did."""
    grants = [d.desired for d in decisions if d.group == group and d.diagnosis == "budget_capped"]
    return max(grants) if grants else None


def sim_inputs(
    config: ModelConfig,
    *,
    time_to_ready_s: float | None,
    initial_replicas: int,
    partitions: int,
    interval_s: float = 5.0,
    budget_cap: int | None = None,
) -> SimInputs:
    """The prediction's settings from model.yaml and what the registry measured; with
    `budget_cap` (`budget_granted`), no more replicas than the live stack could give: a
    plain `make up` on 2 cores has one spare worker in all, where model.yaml allows 12."""
    capped = budget_cap is not None and budget_cap < config.replicas.max
    return SimInputs(
        a_ms=config.engine.sim.a_ms,
        b_ms=config.engine.sim.b_ms,
        per=config.engine.sim.per,
        max_batch_size=config.batching.max_batch_size,
        time_to_ready_s=time_to_ready_s if time_to_ready_s is not None else 30.0,
        time_to_ready_measured=time_to_ready_s is not None,
        initial_replicas=max(initial_replicas, 1),
        partitions=partitions,
        interval_s=interval_s,
        max_replicas=budget_cap if capped and budget_cap is not None else config.replicas.max,
        max_replicas_from="the live stack's replica budget" if capped else "model.yaml",
    )


def predict(
    workload: Workload,
    config: ModelConfig,
    inputs: SimInputs,
    *,
    focus: Phase | None,
    step_s: float = 0.5,
    drain_level: float = 5.0,
) -> dict[str, Any]:
    """Simulate the `slo` policy on the workload; per tier the backlog series, replicas and
    the backlog's peak in the focus phase."""
    params = SimParams(
        service=ServiceModel(
            a_ms=inputs.a_ms,
            b_ms=inputs.b_ms,
            per=inputs.per,  # type: ignore[arg-type]
            max_batch_size=inputs.max_batch_size,
            max_queue_delay_ms=config.batching.max_queue_delay_ms,
        ),
        slo_p99_e2e_ms={tier: config.slo_for(tier).p99_e2e_ms for tier in TIERS},
        time_to_ready_s=inputs.time_to_ready_s,
        partitions=inputs.partitions,
        min_replicas=config.replicas.min,
        warm_replicas=config.replicas.warm,
        max_replicas=inputs.max_replicas,
        initial_replicas=inputs.initial_replicas,
        collection_interval_s=inputs.interval_s,
        drain_s=120.0,
    )
    run = simulate(workload, params, "slo", PolicyConfig())
    end_s = workload.duration_s + 30.0
    at = grid(end_s, step_s)
    focus_start = focus.start_s if focus is not None else 0.0
    tiers: dict[str, Any] = {}
    for outcome in run.groups:
        done = outcome.arrivals + outcome.e2e_s
        series = backlog(outcome.arrivals, done[~np.isnan(done)], at)
        peak: BacklogPeak | None = None
        if focus is not None:
            peak = backlog_peak(
                at,
                series,
                start_s=focus.start_s,
                end_s=min(focus.end_s + 30.0, end_s),
                min_peak=drain_level * 2,
                drain_level=drain_level,
            )
        served = outcome.e2e_s[~np.isnan(outcome.e2e_s)] * 1000
        ticks = [t for t in run.ticks if t.tier == outcome.tier]
        tiers[outcome.tier] = {
            "backlog": {"t": at.round(2).tolist(), "requests": series.tolist()},
            "focus_backlog": None if peak is None else asdict(peak),
            "e2e_p99_ms": round(float(np.percentile(served, 99)), 1) if served.size else None,
            "unserved": int(np.count_nonzero(np.isnan(outcome.e2e_s))),
            "replicas": [[t.t, t.replicas, t.ready, t.desired] for t in ticks],
            "replicas_columns": ["t", "replicas", "ready", "desired"],
            "first_scale_up_s": next(
                (t.t for t in ticks if t.desired > t.replicas and t.t >= focus_start), None
            ),
        }
    return {"inputs": asdict(inputs), "policy": "slo", "tiers": tiers}

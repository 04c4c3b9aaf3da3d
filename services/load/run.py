"""One load run start to finish: send, observe, predict, report (no terminal output here)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from infra.models.config import ModelConfig
from scaler.sim.workload import Workload
from schemas.topics import worker_group
from services.load.driver import LoadRun, RunOptions, Status
from services.load.predict import budget_granted, predict, sim_inputs
from services.load.report import build_report, focus_phase
from services.load.scenarios import LiveScenario


@dataclass(frozen=True)
class LoadSpec:
    """What to send, to which model, and how."""

    workload: Workload
    config: ModelConfig
    options: RunOptions
    scenario: LiveScenario | None = None
    with_prediction: bool = True


def _scenario_fields(scenario: LiveScenario | None) -> dict[str, Any] | None:
    if scenario is None:
        return None
    return {
        "name": scenario.name,
        "summary": scenario.summary,
        "expected": scenario.expected,
        "focus_phase": scenario.focus_phase,
    }


async def run_load(
    spec: LoadSpec, on_status: Callable[[Status], None] = lambda _: None
) -> dict[str, Any]:
    """Run the workload against the stack and return the report (checks included)."""
    load_before = os.getloadavg()[0]
    record = await LoadRun(spec.options, spec.workload, spec.config, on_status).run()
    host = {
        "cpus": os.cpu_count(),
        "load_avg_1m_before": round(load_before, 2),
        "load_avg_1m_after": round(os.getloadavg()[0], 2),
    }
    focus = focus_phase(spec.workload, spec.scenario.focus_phase if spec.scenario else None)
    tier = next(iter(spec.workload.tiers))
    group = worker_group(spec.config.name, tier)
    inputs = sim_inputs(
        spec.config,
        time_to_ready_s=record.observer.time_to_ready_s(group),
        initial_replicas=record.initial_ready.get(group, 1),
        partitions=record.partitions.get(tier, 12) or 12,
        budget_cap=budget_granted(record.observer.decisions, group),
    )
    prediction = None
    if spec.with_prediction and record.interrupted_at_s is None:
        prediction = await asyncio.to_thread(
            predict, spec.workload, spec.config, inputs, focus=focus
        )
    return build_report(
        workload=spec.workload,
        scenario=_scenario_fields(spec.scenario),
        config=spec.config,
        ledger=record.ledger,
        ended_s=record.ended_s,
        grace_s=spec.options.grace_s,
        decisions=record.observer.decisions,
        replicas=record.observer.replicas,
        prediction=prediction,
        interrupted_at_s=record.interrupted_at_s,
        context={
            "bootstrap": spec.options.bootstrap,
            "tenant": spec.options.tenant,
            "timeout_ms": dict(spec.options.timeout_ms),
            "probe_ms": record.probe_ms,
            "initial_ready": record.initial_ready,
            "sim_inputs": asdict(inputs),
            "results_logs_reread": record.logs_reread,
            "host": host,
        },
    )

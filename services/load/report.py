"""The JSON report of a run: accounting and latency per tier and phase, the backlog, the
stack's replicas and decisions, the simulator's prediction and the scenario's checks."""

from __future__ import annotations

import csv
import dataclasses
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from infra.models.config import ModelConfig
from scaler.sim.workload import Phase, Workload
from services.load.checks import checks_for
from services.load.ledger import Ledger
from services.load.observe import REPLICA_STATES, DecisionPoint, ReplicaSample
from services.load.summary import in_window, summarize
from services.load.timeline import BacklogPeak, backlog, backlog_peak, grid, latency, rate

BACKLOG_STEP_S = 0.5
LOST_IDS_LISTED = 50
"""Lost request ids the report lists (`lost_request_ids`); how many more is said beside."""


def backlog_levels(rate_rps: float) -> tuple[float, float]:
    """(min peak, drain level) for a backlog at this arrival rate: a peak counts once half a
    second of arrivals wait; drained means back within a tenth of a second's worth."""
    return max(10.0, rate_rps / 2), max(5.0, rate_rps / 10)


def focus_phase(workload: Workload, name: str | None) -> Phase | None:
    """The named phase of the workload, or None."""
    return next((p for p in workload.phases if p.name == name), None)


def _peak_dict(peak: BacklogPeak | None) -> dict[str, Any] | None:
    return None if peak is None else dataclasses.asdict(peak)


def _tier_backlog(
    ledger: Ledger, tier: str, end_s: float, focus: Phase | None, focus_rps: float
) -> dict[str, Any]:
    requests = [s for s in ledger.sent.values() if s.tier == tier]
    sent_t = np.array([s.t_s for s in requests], dtype=float)
    done_t = np.array(
        [ledger.answered[s.request_id].t_s for s in requests if s.request_id in ledger.answered],
        dtype=float,
    )
    at = grid(end_s, BACKLOG_STEP_S)
    series = backlog(sent_t, done_t, at)
    peak = None
    if focus is not None:
        min_peak, drain = backlog_levels(focus_rps)
        peak = backlog_peak(
            at, series, start_s=focus.start_s, end_s=min(focus.end_s + 30, end_s),
            min_peak=min_peak, drain_level=drain,
        )  # fmt: skip
    return {"t": at.round(2).tolist(), "requests": series.tolist(), "focus": _peak_dict(peak)}


def _scaler_lag_focus(
    decisions: Sequence[DecisionPoint], group: str, focus: Phase | None, focus_rps: float
) -> dict[str, Any] | None:
    points = [d for d in decisions if d.group == group and d.lag is not None]
    if focus is None or not points:
        return None
    at = np.array([d.t_s for d in points], dtype=float)
    lag = np.array([float(d.lag or 0) for d in points], dtype=float)
    min_peak, drain = backlog_levels(focus_rps)
    peak = backlog_peak(
        at, lag, start_s=focus.start_s, end_s=focus.end_s + 30, min_peak=min_peak,
        drain_level=drain,
    )  # fmt: skip
    return _peak_dict(peak)


def _series(ledger: Ledger, tier: str, end_s: float) -> dict[str, Any]:
    requests = ledger.of_tier(tier)  # type: ignore[arg-type]
    ok = [
        (s.t_s, ledger.answered[s.request_id].timings.get("e2e_ms"))
        for s in requests
        if s.request_id in ledger.answered and ledger.answered[s.request_id].status == "ok"
    ]
    answered_t = [
        ledger.answered[s.request_id].t_s for s in requests if s.request_id in ledger.answered
    ]
    starts, p50, p99 = latency(
        [t for t, v in ok if v is not None], [float(v) for _, v in ok if v is not None], end_s
    )

    def clean(values: np.ndarray[Any, Any]) -> list[float | None]:
        return [None if np.isnan(v) else round(float(v), 1) for v in values]

    return {
        "sent_per_s": rate([s.t_s for s in requests], end_s).tolist(),
        "answered_per_s": rate(answered_t, end_s).tolist(),
        "e2e_by_send_time": {"t": starts.tolist(), "p50": clean(p50), "p99": clean(p99)},
    }


def longest_stretch(samples: Sequence[ReplicaSample], group: str, state: str) -> float:
    """The longest time (s) over which the group always had a worker in `state`."""
    longest, since = 0.0, None
    for sample in (s for s in samples if s.group == group):
        if sample.states.get(state, 0) > 0:
            since = sample.t_s if since is None else since
            longest = max(longest, sample.t_s - since)
        else:
            since = None
    return round(longest, 1)


def _replicas(samples: Sequence[ReplicaSample]) -> dict[str, Any]:
    series: dict[str, list[list[float]]] = {}
    for sample in samples:
        row = [sample.t_s, *(float(sample.states.get(s, 0)) for s in REPLICA_STATES)]
        series.setdefault(sample.group, []).append(row)
    return {
        "columns": ["t", *REPLICA_STATES],
        "series": series,
        "longest_joining_s": {g: longest_stretch(samples, g, "joining") for g in series},
    }


def build_report(
    *,
    workload: Workload,
    scenario: Mapping[str, Any] | None,
    config: ModelConfig,
    ledger: Ledger,
    ended_s: float,
    grace_s: float,
    decisions: Sequence[DecisionPoint],
    replicas: Sequence[ReplicaSample],
    prediction: Mapping[str, Any] | None,
    context: Mapping[str, Any],
    interrupted_at_s: float | None = None,
) -> dict[str, Any]:
    """Everything `inferbus load` writes to its JSON, checks included; `interrupted_at_s`:
    when Ctrl-C stopped the sending (None: the run ran its course)."""
    focus = focus_phase(workload, scenario.get("focus_phase") if scenario else None)
    end_s = max(ended_s, workload.duration_s)
    tiers: dict[str, Any] = {}
    backlogs: dict[str, Any] = {}
    lag_focus: dict[str, Any] = {}
    series: dict[str, Any] = {}
    for tier, arrivals in workload.tiers.items():
        slo = config.slo_for(tier).p99_e2e_ms
        requests = ledger.of_tier(tier)
        summary = summarize(ledger, requests, slo_ms=slo, now_s=ended_s, grace_s=grace_s)
        summary["phases"] = {
            p.name: summarize(
                ledger, in_window(requests, p.start_s, p.end_s), slo_ms=slo, now_s=ended_s,
                grace_s=grace_s,
            )
            for p in workload.phases
        }  # fmt: skip
        tiers[tier] = summary
        in_focus = (
            arrivals.times[(arrivals.times >= focus.start_s) & (arrivals.times < focus.end_s)]
            if focus
            else arrivals.times
        )
        span = (focus.end_s - focus.start_s) if focus else workload.duration_s
        focus_rps = in_focus.size / span if span > 0 else 0.0
        backlogs[tier] = _tier_backlog(ledger, tier, end_s, focus, focus_rps)
        group = f"inferbus.workers.{config.name}.{tier}"
        lag_focus[tier] = _scaler_lag_focus(decisions, group, focus, focus_rps)
        series[tier] = _series(ledger, tier, end_s)
    lost_ids = [s.request_id for s in ledger.lost(ended_s, grace_s)]
    report: dict[str, Any] = {
        "kind": "inferbus-load",
        **context,
        "model": config.name,
        "model_replicas": config.replicas.model_dump(),
        "workload": {
            "name": workload.name,
            "source": workload.source,
            "scenario": scenario.get("name") if scenario else None,
            "summary": scenario.get("summary") if scenario else None,
            "expected": scenario.get("expected") if scenario else None,
            "duration_s": workload.duration_s,
            "requests": workload.total(),
            "phase_bounds": {p.name: [p.start_s, p.end_s] for p in workload.phases},
        },
        "ended_s": round(ended_s, 2),
        "interrupted_at_s": None if interrupted_at_s is None else round(interrupted_at_s, 2),
        "grace_s": grace_s,
        "tiers": tiers,
        "totals": {
            "sent": len(ledger.sent),
            "answered": len(ledger.answered),
            "lost": sum(t["lost"] for t in tiers.values()),
            "pending": sum(t["unanswered_within_deadline"] for t in tiers.values()),
            "statuses": dict(sorted(ledger.statuses(ledger.sent.values()).items())),
            "duplicates": ledger.duplicates,
            "error_samples": dict(ledger.error_samples),
        },
        "lost_request_ids": lost_ids[:LOST_IDS_LISTED],
        "lost_request_ids_left_out": max(len(lost_ids) - LOST_IDS_LISTED, 0),
        "backlog": backlogs,
        "scaler": {
            "decisions": [dataclasses.asdict(d) for d in decisions],
            "lag_focus": lag_focus,
        },
        "replicas": _replicas(replicas),
        "series": series,
        "prediction": prediction,
    }
    report["checks"] = [dataclasses.asdict(c) for c in checks_for(report)]
    return report


def write_arrivals_csv(workload: Workload, directory: Path) -> list[Path]:
    """Each tier's arrivals as a trace (`TIMESTAMP,ContextTokens,GeneratedTokens`), so
    `inferbus sim --trace` replays exactly these (its times start at the first request)."""
    base = datetime(2000, 1, 1, tzinfo=UTC)
    written = []
    for tier, arrivals in workload.tiers.items():
        path = directory / f"arrivals-{tier}.csv"
        with path.open("w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["TIMESTAMP", "ContextTokens", "GeneratedTokens"])
            for t, tokens in zip(arrivals.times, arrivals.tokens, strict=True):
                stamp = (base + timedelta(seconds=float(t))).strftime("%Y-%m-%d %H:%M:%S.%f")
                writer.writerow([stamp, int(tokens), 0])
        written.append(path)
    return written

"""Per-tier numbers of a run: sent, ok, each error, lost, e2e percentiles, stage breakdown."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from services.load.ledger import Ledger, Sent
from tracing.attributes import SUMMED_STAGES

STAGES = ("ingest", "queue", "batch_wait", "preprocess", "infer", "postprocess", "e2e")
"""Timing fields of a result (`<stage>_ms`), in the order a request meets them."""
PARTS = SUMMED_STAGES
"""Sums per request: waiting is what more replicas shrink, engine time is what they cannot
(the worker's summed stages, `tracing.attributes.SUMMED_STAGES`)."""


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile, rounded to 0.1 ms; None when there are no values."""
    if not values:
        return None
    return round(float(np.percentile(np.asarray(values, dtype=float), q)), 1)


def spread(values: Sequence[float]) -> dict[str, float | None]:
    """p50, p95 and p99."""
    return {f"p{q}": percentile(values, q) for q in (50, 95, 99)}


def summarize(
    ledger: Ledger,
    requests: Sequence[Sent],
    *,
    slo_ms: float | None,
    now_s: float,
    grace_s: float,
) -> dict[str, Any]:
    """The accounting and latency of some requests (a tier, or a tier in one phase)."""
    ok_e2e: list[float] = []
    roundtrip: list[float] = []
    stages: dict[str, list[float]] = {stage: [] for stage in (*STAGES, *PARTS)}
    batches: list[int] = []
    for sent in requests:
        answer = ledger.answered.get(sent.request_id)
        if answer is None or answer.status != "ok":
            continue
        roundtrip.append((answer.t_s - sent.t_s) * 1000)
        for stage in STAGES:
            value = answer.timings.get(f"{stage}_ms")
            if value is not None:
                stages[stage].append(float(value))
        for part, members in PARTS.items():
            values = [answer.timings.get(f"{m}_ms") for m in members]
            if all(v is not None for v in values):
                stages[part].append(sum(float(v or 0.0) for v in values))
        e2e = answer.timings.get("e2e_ms")
        if e2e is not None:
            ok_e2e.append(float(e2e))
        if answer.batch_size is not None:
            batches.append(answer.batch_size)
    statuses = ledger.statuses(requests)
    lost_ids = {s.request_id for s in ledger.lost(now_s, grace_s)}
    lost = sum(1 for s in requests if s.request_id in lost_ids)
    waiting = sum(1 for s in requests if s.request_id not in ledger.answered) - lost
    within = sum(1 for v in ok_e2e if slo_ms is not None and v <= slo_ms)
    return {
        "sent": len(requests),
        "ok": statuses.get("ok", 0),
        "errors": {status: n for status, n in sorted(statuses.items()) if status != "ok"},
        "lost": lost,
        "unanswered_within_deadline": waiting,
        "e2e_ms": spread(ok_e2e),
        "roundtrip_ms": spread(roundtrip),
        "stages_ms": {
            stage: {"p50": percentile(v, 50), "p99": percentile(v, 99)}
            for stage, v in stages.items()
        },
        "mean_batch_size": round(float(np.mean(batches)), 2) if batches else None,
        "slo_p99_e2e_ms": slo_ms,
        "within_slo": round(within / len(requests), 4) if requests and slo_ms else None,
    }


def in_window(requests: Sequence[Sent], start_s: float, end_s: float) -> list[Sent]:
    """The requests sent in [start_s, end_s)."""
    return [s for s in requests if start_s <= s.t_s < end_s]

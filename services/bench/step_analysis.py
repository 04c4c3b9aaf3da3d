"""What a scale-step run records (scaler ticks, answers) and the report's arithmetic (pure):
reaction times, every request accounted for, SLO attainment per phase."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from services.bench.stats import percentiles
from services.bench.step_schedule import Phase, ScaleStepOptions, phase_bounds


@dataclass(frozen=True)
class Tick:
    """One scaler tick of the group, as the scaler saw and decided it."""

    t: float
    """Seconds from the schedule's start (negative: warm-up)."""
    phase: str
    offered_rps: float
    arrival_rps: float | None
    lag: int | None
    replicas: int | None
    ready: int | None
    starting: int | None
    service_rps_per_replica: float | None
    utilization: float | None
    queue_p99_ms: float | None
    engine_p99_ms: float | None
    e2e_p99_ms: float | None
    current: int | None = None
    desired: int | None = None
    diagnosis: str | None = None
    applied: bool = False
    line: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class Answer:
    """One request: when it was sent (s from the schedule's start) and how it came back."""

    sent_t: float
    status: str | None
    """None: never answered."""
    e2e_ms: float | None
    roundtrip_ms: float | None


def _first(ticks: Sequence[Tick], cond: Callable[[Tick], bool]) -> Tick | None:
    return next((t for t in ticks if cond(t)), None)


def rounded(value: float | None, digits: int = 1) -> float | None:
    """`value` rounded to `digits`, None kept."""
    return None if value is None else round(value, digits)


def reaction(
    ticks: Sequence[Tick], step_at: float, step_end: float, drain_lag: int
) -> dict[str, Any]:
    """Times from the step to the first scale-up, to its replicas ready, to the lag drained."""
    after = [t for t in ticks if t.t >= step_at]
    up = _first(after, lambda t: t.applied and (t.desired or 0) > (t.current or 0))
    ready = None
    if up is not None and up.desired is not None:
        target = up.desired
        ready = _first(after, lambda t: t.t >= up.t and (t.ready or 0) >= target)
    during = [t for t in after if t.t < step_end and t.lag is not None]
    peak = max(during, key=lambda t: t.lag or 0, default=None)
    # The first backlog after the step, and the first tick it is back at or below drain_lag
    # (a later backlog, e.g. from a scale-down's rebalance, shows in peak_lag, not here).
    backed_up = _first(during, lambda t: (t.lag or 0) > drain_lag)
    drained = None
    if backed_up is not None:
        drained = _first(
            after, lambda t: t.t > backed_up.t and t.lag is not None and t.lag <= drain_lag
        )
    peak_replicas = max((t.replicas or 0 for t in after if t.t < step_end), default=None)
    peak_desired = max((t.desired or 0 for t in after if t.t < step_end), default=None)
    down = _first(
        [t for t in ticks if t.t >= step_end],
        lambda t: t.applied and (t.desired or 0) < (t.current or 0),
    )
    return {
        "first_scale_up_s": rounded(up.t - step_at) if up else None,
        "first_scale_up": up.line if up else None,
        "first_scale_up_to": up.desired if up else None,
        "ready_s": rounded(ready.t - step_at) if ready else None,
        "peak_lag": peak.lag if peak else None,
        "peak_lag_s": rounded(peak.t - step_at) if peak else None,
        "lag_drained_s": rounded(drained.t - step_at) if drained else None,
        "drain_lag": drain_lag,
        "peak_replicas": peak_replicas,
        "peak_desired": peak_desired,
        "first_scale_down_after_step_s": rounded(down.t - step_end) if down else None,
        "first_scale_down": down.line if down else None,
        "final_replicas": ticks[-1].replicas if ticks else None,
        "scaling_actions": sum(1 for t in ticks if t.applied),
        "direction_changes": direction_changes(ticks),
    }


def direction_changes(ticks: Sequence[Tick]) -> int:
    """How often an applied change went the other way from the one before (flapping)."""
    signs = [
        1 if (t.desired or 0) > (t.current or 0) else -1
        for t in ticks
        if t.applied and t.desired != t.current
    ]
    return sum(1 for a, b in itertools.pairwise(signs) if a != b)


def completeness(answers: Sequence[Answer]) -> dict[str, Any]:
    """Sent vs ok vs named rejections vs missing: every request must be accounted for."""
    by_status: dict[str, int] = {}
    for a in answers:
        if a.status is not None:
            by_status[a.status] = by_status.get(a.status, 0) + 1
    ok = by_status.get("ok", 0)
    missing = sum(1 for a in answers if a.status is None)
    return {
        "sent": len(answers),
        "ok": ok,
        "rejected": {s: n for s, n in sorted(by_status.items()) if s != "ok"},
        "missing": missing,
        "all_answered": missing == 0,
    }


def attainment(
    answers: Sequence[Answer], phases: Sequence[Phase], slo_ms: float
) -> dict[str, dict[str, Any]]:
    """Per phase (by send time): share of sent requests answered ok within the SLO; a
    rejection or a missing answer counts as a miss. p50/p99 of e2e over the ok ones."""
    out: dict[str, dict[str, Any]] = {}
    for name, start, end in phase_bounds(phases):
        sent = [a for a in answers if start <= a.sent_t < end]
        ok = [a for a in sent if a.status == "ok" and a.e2e_ms is not None]
        met = sum(1 for a in ok if (a.e2e_ms or 0.0) <= slo_ms)
        e2e = percentiles([a.e2e_ms for a in ok if a.e2e_ms is not None])
        roundtrip = percentiles([a.roundtrip_ms for a in ok if a.roundtrip_ms is not None])
        out[name] = {
            "sent": len(sent),
            "ok": len(ok),
            "within_slo": met,
            "attainment": round(met / len(sent), 4) if sent else None,
            "e2e_p50_ms": rounded(e2e["p50"]),
            "e2e_p99_ms": rounded(e2e["p99"]),
            "e2e_max_ms": rounded(max((a.e2e_ms or 0.0 for a in ok), default=None)),
            "roundtrip_p99_ms": rounded(roundtrip["p99"]),
        }
    return out


def analyze(
    ticks: Sequence[Tick],
    answers: Sequence[Answer],
    options: ScaleStepOptions,
) -> dict[str, Any]:
    """The report's numbers from what was recorded."""
    phases = options.schedule()
    bounds = {name: (start, end) for name, start, end in phase_bounds(phases)}
    step_at = bounds["step"][0]
    high_end = bounds.get("kill", bounds["step"])[1]
    needed = math.ceil(options.high_rps / options.capacity_rps(options.max_batch_size))
    return {
        "reaction": reaction(ticks, step_at, high_end, options.drain_lag),
        "needed_replicas": {
            "step_at_full_batches": needed,
            "step_at_batch_1": math.ceil(options.high_rps / options.capacity_rps(1)),
            "note": "engine time only: the high rate over one replica's capacity at 100% busy",
        },
        "answers": completeness(answers),
        "slo_attainment": attainment(answers, phases, options.slo_p99_ms),
    }


def summary_line(report: dict[str, Any]) -> str:
    """One line: reaction times, answers, attainment."""
    r, a, s = report["reaction"], report["answers"], report["slo_attainment"]

    def sec(v: float | None) -> str:
        return "never" if v is None else f"{v:.0f}s"

    def pct(v: float | None) -> str:
        return "-" if v is None else f"{100 * v:.1f}%"

    rejected = sum(a["rejected"].values())
    need = report["needed_replicas"]["step_at_batch_1"]
    return (
        f"step {report['options']['low_rps']:.0f}→{report['options']['high_rps']:.0f} req/s: "
        f"first scale-up +{sec(r['first_scale_up_s'])} (→{r['first_scale_up_to']}), "
        f"ready +{sec(r['ready_s'])}, lag {r['peak_lag']} drained +{sec(r['lag_drained_s'])}; "
        f"peak replicas {r['peak_replicas']} (need ~{need}), "
        f"final {r['final_replicas']} | answered ok {a['ok']}/{a['sent']}, rejected {rejected}, "
        f"missing {a['missing']} | SLO {report['options']['slo_p99_ms']:.0f} ms met: "
        + ", ".join(f"{name} {pct(row['attainment'])}" for name, row in s.items())
    )

"""Each scenario's expected shape as checks on a finished report (pure).

A check is `ok` True or False, or None when it only reports numbers to read side by side
(the burst's live backlog against the simulator's).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Check:
    """One expectation and what the run showed."""

    name: str
    ok: bool | None
    detail: str


Report = Mapping[str, Any]
REPEATS_ALLOWED = 0.05
"""Repeated results allowed, as a share of requests: a rebalance or a retry repeats a few;
more means partitions were read again in bulk."""
SHED = ("rejected_overload", "deadline_exceeded")
"""Error statuses that are the platform shedding load it cannot serve in time: reported as
a share, never a failure. Any other error (invalid_input, model_not_found, unauthorized,
internal_error, not_sent, ...) means the requests or the stack are broken, and fails."""


def _phase(report: Report, tier: str, phase: str) -> Mapping[str, Any]:
    return report["tiers"][tier]["phases"][phase]  # type: ignore[no-any-return]


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} ms"


def _peak(peak: Mapping[str, Any] | None) -> str:
    if peak is None:
        return "no backlog (capacity kept up)"
    drained = peak["drained_after_s"]
    return (
        f"grew for {peak['grew_for_s']:.0f} s to {peak['peak']:.0f} requests, "
        f"{'drained +' + format(drained, '.0f') + ' s' if drained is not None else 'not drained'}"
    )


def nothing_lost(report: Report) -> list[Check]:
    """Every request got a result by its deadline plus the grace; every send happened; few
    results came twice."""
    lost = {tier: t["lost"] for tier, t in report["tiers"].items()}
    sent = sum(t["sent"] for t in report["tiers"].values())
    scheduled = report["workload"]["requests"]
    repeats = report["totals"]["duplicates"]
    pending = report["totals"].get("pending", 0)
    interrupted = report.get("interrupted_at_s") is not None
    return [
        Check(
            "nothing lost",
            all(n == 0 for n in lost.values()),
            ", ".join(f"{tier}: {n} lost" for tier, n in lost.items())
            + (f"; {pending} still pending when it stopped (not counted lost)" if pending else ""),
        ),
        Check(
            "sent as scheduled",
            None if interrupted else sent == scheduled,
            f"{sent} of {scheduled} sent" + (" (interrupted)" if interrupted else ""),
        ),
        Check(
            "few repeated results (at-least-once redelivery)",
            repeats <= REPEATS_ALLOWED * max(sent, 1),
            f"{repeats} repeats for {sent} requests (dropped by request id; more than "
            f"{REPEATS_ALLOWED:.0%} means requests were redelivered in bulk)",
        ),
    ]


def answered_without_errors(report: Report) -> list[Check]:
    """No request answered with an error that means it or the stack is broken; what was
    shed under overload reported as a share of what was sent."""
    statuses: Mapping[str, int] = report["totals"].get("statuses", {})
    answered = sum(statuses.values())
    sent = max(report["totals"]["sent"], 1)
    broken = {s: n for s, n in statuses.items() if s != "ok" and s not in SHED}
    detail = f"none of {answered} answered"
    if broken:
        samples = report["totals"].get("error_samples", {})
        example = next((samples[s] for s in broken if s in samples), None)
        detail = ", ".join(f"{s} {n}" for s, n in broken.items()) + f" of {answered} answered"
        detail += f"; e.g. {example}" if example else ""
    shed = ", ".join(f"{s} {statuses.get(s, 0)} ({statuses.get(s, 0) / sent:.1%})" for s in SHED)
    return [
        Check("no request answered with an error (other than shedding)", not broken, detail),
        Check("shed under overload, share of sent", None, shed),
    ]


def _at_max(report: Report, at_s: float) -> bool:
    """The group already had its replicas.max when a phase began (nothing left to add)."""
    top = report["model_replicas"]["max"]
    before = [d for d in report["scaler"]["decisions"] if d["t_s"] <= at_s + 1]
    return bool(before) and before[-1]["desired"] >= top


def _budget_capped(report: Report, end_s: float) -> list[Mapping[str, Any]]:
    """Decisions up to `end_s` that the stack's replica budget held below what they wanted."""
    return [
        d
        for d in report["scaler"]["decisions"]
        if d["diagnosis"] == "budget_capped" and d["t_s"] <= end_s
    ]


def _scale_out(report: Report, name: str, start_s: float, end_s: float) -> Check:
    """A scale-out within the phase, or replicas already at the maximum when it began; not
    judged (None) when the stack's replica budget was spent: the scaler wanted more and
    had none to give (2 cores under plain `make up`: one worker beyond the six started)."""
    ups = _scale_ups(report, start_s, end_s)
    if not ups and _at_max(report, start_s):
        top = report["model_replicas"]["max"]
        return Check(name, True, f"already at replicas.max {top} when the phase began")
    capped = _budget_capped(report, end_s)
    if not ups and capped:
        return Check(
            name,
            None,
            "not judged: the stack's replica budget was spent ("
            + "; ".join(f"t={d['t_s']:.0f}s {d['line']}" for d in capped[-2:])
            + "); INFERBUS_SCALER_MAX_TOTAL_REPLICAS sets a larger one",
        )
    return Check(
        name,
        bool(ups),
        "; ".join(f"t={d['t_s']:.0f}s {d['line']}" for d in ups[:3]) or "no scale-up",
    )


def _scale_ups(report: Report, start_s: float, end_s: float) -> list[Mapping[str, Any]]:
    return [
        d
        for d in report["scaler"]["decisions"]
        if d["applied"] and d["desired"] > d["current"] and start_s <= d["t_s"] <= end_s
    ]


def _live_scale_out(report: Report, start_s: float, end_s: float) -> str:
    """When the scaler first scaled out, and when its ready (consuming) replicas got there."""
    ups = _scale_ups(report, start_s, end_s)
    if not ups:
        return "no scale-out"
    target = max(d["desired"] for d in ups)
    ready = next(
        (
            d["t_s"]
            for d in report["scaler"]["decisions"]
            if d["t_s"] >= ups[0]["t_s"] and (d["ready"] or 0) >= target
        ),
        None,
    )
    at = "never" if ready is None else f"t={ready:.0f}s"
    joining = max(report["replicas"].get("longest_joining_s", {}).values(), default=0.0)
    return (
        f"scale-out at t={ups[0]['t_s']:.0f}s, {target} consuming at {at}; new replicas "
        f"registered ready but held no partition for up to {joining:.0f} s"
    )


def _sim_scale_out(tier: Mapping[str, Any], start_s: float, end_s: float) -> str:
    rows = [r for r in tier.get("replicas", []) if start_s <= r[0] <= end_s]
    up = next((r for r in rows if r[3] > r[1]), None)
    if up is None:
        return "no scale-out"
    target = max(r[3] for r in rows)
    ready = next((r[0] for r in tier["replicas"] if r[0] >= up[0] and r[2] >= target), None)
    at = "never" if ready is None else f"t={ready:.0f}s"
    return f"scale-out at t={up[0]:.0f}s, {target} consuming at {at}"


def burst(report: Report) -> list[Check]:
    """Backlog growth next to the simulator's prediction; a scale-out; drained after."""
    start, end = report["workload"]["phase_bounds"]["burst"]
    live = report["backlog"]["interactive"]["focus"]
    predicted = (report.get("prediction") or {}).get("tiers", {}).get("interactive", {})
    sim = predicted.get("focus_backlog") if predicted else None
    scaler = report["scaler"]["lag_focus"].get("interactive")
    simulated = (
        f"simulator {_peak(sim)} ({_sim_scale_out(predicted, start, end + 10)})"
        if predicted
        else "simulator not run"
    )
    return [
        Check(
            "time until the backlog stops growing: live vs simulator",
            None,
            f"live {_peak(live)} ({_live_scale_out(report, start, end + 10)}); {simulated}; "
            f"scaler's lag (5 s ticks) {_peak(scaler)}",
        ),
        _scale_out(report, "the scaler scales out during the burst", start, end + 10),
        Check(
            "the backlog drains after the burst",
            live is None or live["drained_after_s"] is not None,
            _peak(live),
        ),
    ]


def long_context(report: Report) -> list[Check]:
    """Engine time rises with the inputs; waiting does not; the SLO holds."""
    short, long = _phase(report, "interactive", "short"), _phase(report, "interactive", "long")
    engine_short = short["stages_ms"]["engine"]["p50"]
    engine_long = long["stages_ms"]["engine"]["p50"]
    ratio = engine_long / engine_short if engine_short and engine_long else None
    wait = long["stages_ms"]["wait"]["p99"]
    e2e = long["e2e_ms"]["p99"]
    slo = long["slo_p99_e2e_ms"]
    start, end = report["workload"]["phase_bounds"]["long"]
    engine_ups = [d for d in _scale_ups(report, start, end) if d["diagnosis"] == "engine_bound"]
    return [
        Check(
            "engine time rises several-fold with long inputs",
            ratio is not None and ratio >= 3,
            f"engine p50 {_ms(engine_short)} short → {_ms(engine_long)} long"
            + (f" (x{ratio:.1f})" if ratio else ""),
        ),
        Check(
            "waiting (queue + batch wait) stays a small share of e2e with long inputs",
            wait is not None and e2e is not None and wait <= 0.5 * e2e,
            f"wait p99 {_ms(wait)} of e2e p99 {_ms(e2e)}",
        ),
        Check(
            "interactive p99 within its SLO with long inputs",
            e2e is not None and slo is not None and e2e <= slo,
            f"e2e p99 {_ms(e2e)}, SLO {_ms(slo)}",
        ),
        Check(
            "no scale-out on an engine-bound diagnosis",
            not engine_ups,
            "; ".join(d["line"] for d in engine_ups[:2]) or "none",
        ),
    ]


def mixed(report: Report) -> list[Check]:
    """Interactive p99 within its SLO in every phase while batch doubles."""
    phases = report["tiers"]["interactive"]["phases"]
    slo = report["tiers"]["interactive"]["slo_p99_e2e_ms"]
    p99 = {name: p["e2e_ms"]["p99"] for name, p in phases.items()}
    bounds = report["workload"]["phase_bounds"]
    batch = report["tiers"]["batch"]["phases"]

    def rps(phase: str) -> float:
        start, end = bounds[phase]
        return float(batch[phase]["sent"]) / float(end - start)

    ratio = rps("batch-x2") / rps("base") if rps("base") else 0.0
    return [
        Check(
            "interactive p99 within its SLO in every phase",
            all(v is not None and slo is not None and v <= slo for v in p99.values()),
            ", ".join(f"{name} {_ms(v)}" for name, v in p99.items()) + f" (SLO {_ms(slo)})",
        ),
        Check(
            "batch doubles",
            1.6 <= ratio <= 2.4,
            f"batch {rps('base'):.0f}/s → {rps('batch-x2'):.0f}/s (x{ratio:.2f}); batch e2e p99 "
            f"{_ms(batch['batch-x2']['e2e_ms']['p99'])} while doubled",
        ),
    ]


def warmup(report: Report) -> list[Check]:
    """A scale-out during the ramp, replicas seen warming, the backlog drained after."""
    start, end = report["workload"]["phase_bounds"]["ramp"]
    warming = [
        row
        for group in report["replicas"]["series"].values()
        for row in group
        if start <= row[0] <= end and (row[1] + row[2]) > 0
    ]
    live = report["backlog"]["interactive"]["focus"]
    return [
        _scale_out(report, "the scaler scales out during the ramp", start, end),
        Check(
            "new replicas seen loading or warming",
            bool(warming),
            f"{len(warming)} one-second samples with replicas loading/warming"
            + (f", first at t={warming[0][0]:.0f}s" if warming else "")
            + f"; {_live_scale_out(report, start, end)}",
        ),
        Check(
            "the backlog drains", live is None or live["drained_after_s"] is not None, _peak(live)
        ),
    ]


SCENARIO_CHECKS: dict[str, Callable[[Report], list[Check]]] = {
    "burst": burst,
    "long-context": long_context,
    "mixed": mixed,
    "warmup": warmup,
}


def checks_for(report: Report) -> list[Check]:
    """The common checks, then the scenario's own; for a run stopped by Ctrl-C, a failed
    check saying so instead of the scenario's (its shape needs the whole schedule)."""
    common = [*nothing_lost(report), *answered_without_errors(report)]
    stopped = report.get("interrupted_at_s")
    if stopped is not None:
        sent, scheduled = report["totals"]["sent"], report["workload"]["requests"]
        return [
            *common,
            Check(
                "ran its course",
                False,
                f"interrupted (Ctrl-C) at t={stopped:.1f}s after {sent} of {scheduled} "
                "requests; the scenario's checks were not run",
            ),
        ]
    extra = SCENARIO_CHECKS.get(str(report["workload"].get("scenario")))
    return [*common, *(extra(report) if extra is not None else [])]

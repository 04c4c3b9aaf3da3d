"""The scale-step report as a picture: load, replicas, lag, latency and per-partition stalls."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from services.bench.stats import percentiles
from services.bench.step_schedule import Phase, phase_bounds


def plot_scale_step(report: dict[str, Any], path: Path) -> None:
    """Load, replicas, lag and e2e p99 over time, the step shaded, decisions marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ticks = [t for t in report["ticks"] if t["t"] >= -5]
    options = report["options"]
    bounds = phase_bounds([Phase(**p) for p in report["schedule"]])
    step_at, step_end = next((s, e) for n, s, e in bounds if n == "step")
    kill_phase = next(((s, e) for n, s, e in bounds if n == "kill"), None)
    ts = [t["t"] for t in ticks]
    fig, axes = plt.subplots(5, 1, figsize=(11, 14), sharex=True, height_ratios=(1, 1, 1, 1, 1.4))
    load, reps, lag, lat, gaps = axes
    load.plot(ts, [t["offered_rps"] for t in ticks], drawstyle="steps-post", label="offered")
    load.plot(ts, [t["arrival_rps"] for t in ticks], label="arrival (scaler)")
    ready_cap = [(t["ready"] or 0) * report["capacity_rps_per_replica"]["batch_1"] for t in ticks]
    load.plot(ts, ready_cap, ":", label="ready replicas × capacity (batch 1)")
    load.set_ylabel("req/s")
    load.legend(loc="upper right", fontsize=8)
    reps.plot(ts, [t["replicas"] for t in ticks], drawstyle="steps-post", label="replicas")
    reps.plot(ts, [t["ready"] for t in ticks], drawstyle="steps-post", label="ready")
    reps.plot(ts, [t["desired"] for t in ticks], "x", label="desired")
    for t in ticks:
        if t["applied"]:
            reps.annotate(f"{t['current']}→{t['desired']}", (t["t"], t["desired"]), fontsize=7)
    reps.set_ylabel("replicas")
    reps.legend(loc="upper right", fontsize=8)
    lag.plot(ts, [t["lag"] for t in ticks], color="#a33")
    lag.set_ylabel("lag (requests)")
    lat.plot(ts, [t["e2e_p99_ms"] for t in ticks], label="e2e p99 (scaler window)")
    lat.plot(ts, [t["queue_p99_ms"] for t in ticks], label="queue p99 (scaler)")
    per_second: dict[int, list[float]] = {}
    for sent_t, status, e2e, _ in report["requests"]:
        if status == "ok" and e2e is not None:
            per_second.setdefault(int(sent_t // 2) * 2, []).append(e2e)
    secs = sorted(per_second)
    lat.plot(
        secs,
        [float(percentiles(per_second[s])["p99"] or 0.0) for s in secs],
        ".",
        markersize=3,
        label="e2e p99 of requests sent in each 2 s",
    )
    lat.axhline(options["slo_p99_ms"], color="k", linestyle="--", linewidth=0.8, label="SLO")
    lat.set_yscale("log")
    lat.set_ylabel("ms")
    lat.legend(loc="upper right", fontsize=8)
    _plot_gaps(gaps, report)
    gaps.set_xlabel("s from the start of the schedule")
    for ax in axes:
        ax.axvspan(step_at, step_end, color="#fc0", alpha=0.15)
        if kill_phase is not None:
            ax.axvspan(*kill_phase, color="#f66", alpha=0.12)
        ax.grid(alpha=0.3)
    r = report["reaction"]
    load.set_title(
        f"scale-step {options['low_rps']:g}→{options['high_rps']:g} req/s: scale-up "
        f"+{r['first_scale_up_s']}s, ready +{r['ready_s']}s, lag drained +{r['lag_drained_s']}s"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _plot_gaps(ax: Any, report: dict[str, Any]) -> None:
    """Per partition: every stall of 0.1 s or more as a bar (colour by length), moves as
    dots where the new owner acquired the partition, changes as lines, kills in red."""
    colours = ((1.0, "#d62728"), (0.5, "#ff7f0e"), (0.0, "#999999"))
    for partition, start, end in report.get("stalls", []):
        colour = next(c for limit, c in colours if end - start >= limit)
        ax.broken_barh([(start, end - start)], (partition - 0.4, 0.8), color=colour)
    handover = report.get("handover") or {}
    for change in handover.get("changes", []):
        style = "-" if change["trigger"] == "kill" else ":"
        colour = "#d62728" if change["trigger"] == "kill" else "#1f77b4"
        ax.axvline(change["start_t"], color=colour, linestyle=style, linewidth=0.7)
        for move in change["moved"]:
            if move["acquired_s"] is not None:
                ax.plot(change["start_t"] + move["acquired_s"], move["partition"], "o",
                        color="#1f77b4", markersize=3)  # fmt: skip
    ax.set_ylabel("partition")
    ax.set_ylim(-0.6, max(report.get("partitions") or 1, 1) - 0.4)
    ax.set_title(
        "stalls (a record waiting, none read): grey < 0.5 s, orange 0.5-1 s, red >= 1 s; "
        "dots: moved partition acquired; dotted: membership change; red line: kill",
        fontsize=8,
    )

"""The PNG timeline of a load report: arrivals, latency against the SLO, backlog, replicas
by state, and the scaler's decisions as vertical marks on every panel."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

_TIER_COLORS = {"critical": "#b2182b", "interactive": "#2166ac", "batch": "#1b7837"}
_STATE_COLORS = {
    "loading": "#fdae61",
    "warming": "#fee08b",
    "joining": "#d9ef8b",
    "ready": "#1a9850",
    "draining": "#bababa",
}


def plot_report(report: Mapping[str, Any], path: Path) -> None:
    """Write the timeline PNG for a report built by `services.load.report.build_report`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(4, 1, figsize=(12, 12), sharex=True)
    arrivals, lat, backlog, replicas = axes
    for tier, series in report["series"].items():
        color = _TIER_COLORS.get(tier, "k")
        sent = series["sent_per_s"]
        arrivals.plot(range(len(sent)), sent, color=color, label=f"{tier} sent/s")
        answered = series["answered_per_s"]
        arrivals.plot(range(len(answered)), answered, ":", color=color, label=f"{tier} answered/s")
        e2e = series["e2e_by_send_time"]
        lat.plot(e2e["t"], e2e["p99"], color=color, label=f"{tier} e2e p99")
        lat.plot(e2e["t"], e2e["p50"], "--", color=color, alpha=0.6, label=f"{tier} e2e p50")
        slo = report["tiers"][tier]["slo_p99_e2e_ms"]
        lat.axhline(slo, color=color, linestyle=":", linewidth=1, label=f"{tier} SLO {slo:g} ms")
        live = report["backlog"][tier]
        backlog.plot(live["t"], live["requests"], color=color, label=f"{tier} backlog (client)")
        predicted = ((report.get("prediction") or {}).get("tiers") or {}).get(tier)
        if predicted:
            sim = predicted["backlog"]
            backlog.plot(sim["t"], sim["requests"], "--", color=color, alpha=0.7,
                         label=f"{tier} backlog (simulator)")  # fmt: skip
    for decision in report["scaler"]["decisions"]:
        if decision["lag"] is not None:
            color = _TIER_COLORS.get(decision["tier"], "k")
            backlog.plot(decision["t_s"], decision["lag"], "o", color=color, markersize=3)
    backlog.plot([], [], "o", color="k", markersize=3, label="scaler's lag (decisions)")
    _replicas(replicas, report)
    for decision in report["scaler"]["decisions"]:
        if decision["applied"] and decision["desired"] != decision["current"]:
            for ax in axes:
                ax.axvline(decision["t_s"], color="#762a83", alpha=0.5, linewidth=1)
            replicas.annotate(
                f"{decision['tier'][:5]} {decision['current']}→{decision['desired']}",
                (decision["t_s"], 0.2), rotation=90, fontsize=7, color="#762a83",
            )  # fmt: skip
    bounds = report["workload"]["phase_bounds"]
    end_s = max(report["ended_s"], report["workload"]["duration_s"]) + 2
    for ax in axes:
        ax.set_xlim(-1, end_s)
        for i, (start, end) in enumerate(bounds.values()):
            if i % 2:
                ax.axvspan(start, end, color="#999", alpha=0.08)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="upper right", fontsize=7, ncol=2)
    arrivals.set_ylabel("requests/s")
    lat.set_ylabel("ms (by send time)")
    lat.set_yscale("log")
    backlog.set_ylabel("requests waiting")
    replicas.set_ylabel("workers")
    replicas.set_xlabel("seconds from the start of the schedule (phases shaded)")
    totals = report["totals"]
    arrivals.set_title(
        f"inferbus load: {report['workload']['source']} on {report['model']} — "
        f"{totals['sent']} sent, {totals['lost']} lost"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _replicas(ax: Any, report: Mapping[str, Any]) -> None:
    """Stacked workers by state for each group (groups side by side share the axis)."""
    columns = report["replicas"]["columns"]
    states = columns[1:]
    groups = report["replicas"]["series"]
    for n, (group, rows) in enumerate(sorted(groups.items())):
        if not rows:
            continue
        t = [row[0] for row in rows]
        stacks = [[row[1 + i] for row in rows] for i in range(len(states))]
        tier = group.rsplit(".", 1)[-1]
        if len(groups) == 1:
            ax.stackplot(
                t, stacks, labels=states, colors=[_STATE_COLORS[s] for s in states], alpha=0.9
            )
            continue
        total = [sum(col) for col in zip(*stacks, strict=True)]
        ready = stacks[states.index("ready")]
        color = _TIER_COLORS.get(tier, f"C{n}")
        ax.plot(t, total, "--", color=color, label=f"{tier} workers (any state)")
        ax.plot(t, ready, color=color, label=f"{tier} ready")

"""A PNG of load, replicas and latency over time, one column per policy."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: never open a window, also on machines with a display
import matplotlib.pyplot as plt

from infra.files import output_problem
from scaler.sim.report import Comparison

IMAGE_SUFFIXES = (".png", ".svg", ".pdf")
"""What `plot` writes (by the name's extension): formats matplotlib needs nothing else for."""


def plot_path_problem(path: Path) -> str | None:
    """Why `plot` could not write an image at `path`, or None."""
    if path.is_dir():
        return f"is a folder; name an image file in it, such as {path / 'sim.png'}"
    if path.suffix.lower() not in IMAGE_SUFFIXES:
        return f"the name must end in {', '.join(IMAGE_SUFFIXES)} (the image's format)"
    return output_problem(path)


def plot(cmp: Comparison, path: Path) -> None:
    """Rows: arrival rate, replicas (with the oracle's schedule), e2e p99 vs SLO; per policy."""
    runs = cmp.runs
    fig, axes = plt.subplots(3, len(runs), figsize=(5 * len(runs), 9), sharex=True, squeeze=False)
    for col, run in enumerate(runs):
        for tier in sorted({t.tier for t in run.ticks}):
            ticks = [t for t in run.ticks if t.tier == tier]
            ts = [t.t / 60 for t in ticks]
            axes[0][col].plot(ts, [t.arrival_rps for t in ticks], label=tier, lw=0.8)
            axes[1][col].plot(ts, [t.replicas for t in ticks], label=f"{tier}", lw=0.9)
            axes[1][col].plot(ts, [t.ready for t in ticks], ls=":", lw=0.8, label=f"{tier} ready")
            if any(t.standby for t in ticks):
                axes[1][col].plot(
                    ts, [t.standby for t in ticks], ls="-.", lw=0.8, label=f"{tier} standby"
                )
            o = cmp.oracles[tier]
            axes[1][col].step(
                [i * o.step_s / 60 for i in range(len(o.replicas))],
                o.replicas,
                where="post",
                ls="--",
                lw=0.8,
                label=f"{tier} oracle",
            )
            axes[2][col].plot(
                ts,
                [t.e2e_p99_ms if t.e2e_p99_ms is not None else float("nan") for t in ticks],
                lw=0.8,
                label=tier,
            )
            axes[2][col].axhline(cmp.params.slo_p99_e2e_ms[tier], ls="--", lw=0.6, color="grey")
        axes[0][col].set_title(f"{run.policy} on {cmp.workload}")
        axes[0][col].set_ylabel("arrivals /s")
        axes[1][col].set_ylabel("replicas")
        axes[2][col].set_ylabel("e2e p99 ms (window)")
        axes[2][col].set_yscale("log")
        axes[2][col].set_xlabel("minutes")
        for row in axes:
            row[col].legend(fontsize=6)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)

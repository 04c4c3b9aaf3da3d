"""What a scaler restart costs, with and without recall (`scaler/recall.py`), in the simulator.

    python scripts/scaler_restart.py OUT TRACE.csv [TRACE.csv ...] [--rate-scale 20]
                                     [--restart-at-s 1800] [--gap-s 0] [--seed 1]
                                     [--tiers interactive] [--max-total-replicas N]

Runs `slo` on each trace from the same start: no restart; the scaler restarted at
`--restart-at-s` with no memory (what a restart did before recall); restarted, its last 45
minutes of decisions replayed (what the live scaler does at start). `--gap-s`: no scaler runs
for that long from the restart (the new process starting), so nothing is decided then, and
a fourth run pauses the scaler for the gap with the memory it had (no new process can): the
gap's own cost, which recall is measured against. `--tiers interactive,batch` spreads
each trace over several groups (a request to each at random, as `inferbus sim --tiers`
does), which the policy decides together, and `--max-total-replicas` gives them a shared
budget. Writes OUT/restart.json
(attainment and replica-seconds against the oracle, per trace and run) and OUT/restart.png.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scaler.config import PolicyConfig
from scaler.sim.engine import SimRun
from scaler.sim.params import SimParams
from scaler.sim.report import compare
from scaler.sim.workload import from_trace
from schemas.topics import TIERS, Tier, parse_tiers


@dataclass(frozen=True)
class Restart:
    """How the scaler restarts in one run (`SimParams.scaler_recall`, `..._keeps_memory`)."""

    recall: bool = True
    keeps_memory: bool = False


RUNS: dict[str, Restart | None] = {
    "no restart": None,
    "restart, no memory": Restart(recall=False),
    "restart, recall": Restart(),
    "pause, memory kept": Restart(keeps_memory=True),
}
"""Each run by name (None: no restart). The pause, run only with a gap (without one it is
the run with no restart), is what recall is measured against: the gap's own cost, with the
memory the scaler had."""


@dataclass(frozen=True)
class Setup:
    """What every trace is run with."""

    rate_scale: float
    seed: int
    restart_at_s: float
    gap_s: float
    tiers: tuple[Tier, ...]
    max_total_replicas: int | None


def run_trace(path: Path, setup: Setup) -> dict[str, Any]:
    """The runs of one trace, each as attainment % and cost ÷ oracle per tier, and whether
    its ticks are those of the run with no restart (and, with a gap, recall's those of the
    pause)."""
    workload = from_trace(
        path,
        rate_scale=setup.rate_scale,
        tiers=setup.tiers,
        max_input_tokens=512,
        seed=setup.seed,
    )
    base = dataclasses.replace(
        SimParams().with_overrides(workload.overrides),
        max_total_replicas=setup.max_total_replicas,
    )
    result: dict[str, Any] = {}
    still: SimRun | None = None
    ticks: dict[str, Any] = {}
    for name, restart in RUNS.items():
        if restart is not None and restart.keeps_memory and not setup.gap_s:
            continue
        params = (
            base
            if restart is None
            else dataclasses.replace(
                base,
                scaler_restart_at_s=setup.restart_at_s,
                scaler_restart_gap_s=setup.gap_s,
                scaler_recall=restart.recall,
                scaler_restart_keeps_memory=restart.keeps_memory,
            )
        )
        comparison = compare(workload, params, ["slo"], PolicyConfig())
        tiers: dict[str, Any] = {}
        for summary in comparison.summaries:
            if summary.policy != "slo":
                continue
            oracle_cost = comparison.oracles[summary.tier].replica_seconds
            tiers[summary.tier] = {
                "attainment_pct": round(100 * summary.attainment, 3),
                "cost_vs_oracle": round(summary.replica_seconds / oracle_cost, 4),
            }
        run = comparison.runs[0]
        still = still or run
        # Every tick's count and reading the same as without a restart: the same run.
        tiers["same_ticks_as_no_restart"] = run.ticks == still.ticks
        result[name] = tiers
        ticks[name] = run.ticks
        print(f"{path.stem} x{setup.rate_scale:g} {name}: {tiers}", file=sys.stderr, flush=True)
    if "pause, memory kept" in ticks:
        same = ticks["restart, recall"] == ticks["pause, memory kept"]
        result["restart, recall"]["same_ticks_as_pause"] = same
    return result


def plot(table: dict[str, dict[str, Any]], out: Path, gap_s: float, tier: Tier) -> None:
    """Each restart's change against the run without one: attainment points and cost."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    traces = list(table)
    first = next(iter(table.values()))
    restarts = [name for name, restart in RUNS.items() if restart is not None and name in first]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(max(6, 1.3 * len(traces)), 6), sharex=True)
    width = 0.8 / len(restarts)
    for i, name in enumerate(restarts):
        xs = [k + (i - (len(restarts) - 1) / 2) * width for k in range(len(traces))]
        points, cost = [], []
        for t in traces:
            still, restarted = table[t]["no restart"][tier], table[t][name][tier]
            points.append(restarted["attainment_pct"] - still["attainment_pct"])
            cost.append(restarted["cost_vs_oracle"] - still["cost_vs_oracle"])
        # A marker as well as the bar: a change of 0 (what recall should give) has no bar.
        bars = top.bar(xs, points, width, label=name)
        colour = bars.patches[0].get_facecolor() if bars.patches else None
        top.plot(xs, points, "o", markersize=3, color=colour)
        bottom.bar(xs, cost, width, color=colour)
        bottom.plot(xs, cost, "o", markersize=3, color=colour)
    for axis in (top, bottom):
        axis.axhline(0, color="black", linewidth=0.6)
    top.set_ylabel(f"{tier} attainment, points vs no restart")
    top.legend(fontsize=8)
    bottom.set_ylabel(f"{tier} replica-s ÷ oracle, vs no restart")
    bottom.set_xticks(range(len(traces)), traces, rotation=30, ha="right", fontsize=8)
    gap = f", {gap_s:g} s without a scaler" if gap_s else ""
    top.set_title(f"slo policy: the scaler restarted mid-trace{gap}, with and without recall")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("traces", type=Path, nargs="+")
    parser.add_argument("--rate-scale", type=float, default=20.0)
    parser.add_argument("--restart-at-s", type=float, default=1800.0)
    parser.add_argument("--gap-s", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--tiers", default="interactive")
    parser.add_argument("--max-total-replicas", type=int, default=None)
    args = parser.parse_args(argv)
    try:
        tiers = tuple(parse_tiers(args.tiers))  # as `inferbus sim --tiers` reads them
    except ValueError as exc:
        parser.error(f"--tiers {exc}")
    setup = Setup(
        rate_scale=args.rate_scale,
        seed=args.seed,
        restart_at_s=args.restart_at_s,
        gap_s=args.gap_s,
        tiers=tiers,
        max_total_replicas=args.max_total_replicas,
    )
    args.out.mkdir(parents=True, exist_ok=True)
    table = {f"{p.stem} x{args.rate_scale:g}": run_trace(p, setup) for p in args.traces}
    report = {
        "command": " ".join(["python scripts/scaler_restart.py", *sys.argv[1:]]),
        "restart_at_s": args.restart_at_s,
        "gap_s": args.gap_s,
        "rate_scale": args.rate_scale,
        "seed": args.seed,
        "tiers": list(tiers),
        "max_total_replicas": args.max_total_replicas,
        "runs": table,
    }
    (args.out / "restart.json").write_text(json.dumps(report, indent=1) + "\n")
    # The most urgent tier of those run (the plot shows one; the JSON has them all).
    plot(table, args.out / "restart.png", args.gap_s, min(setup.tiers, key=TIERS.index))
    print(f"wrote {args.out / 'restart.json'} and {args.out / 'restart.png'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

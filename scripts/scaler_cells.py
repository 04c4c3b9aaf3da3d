"""Run `inferbus sim --policy slo` on the scaler's benchmark cells and judge each one.

    python scripts/scaler_cells.py OUT [--set all|stop42|stop49] [--only on-off,periodic-s1]
                                       [--config C.json] [--jobs 2] [--compare OLD.json]

The cells are the ones docs/benchmarks.md reports (stops 42-50): the five families
(`inferbus scaler traffic`, seeds 1-8 tuning, 9-10 held out), the Azure conversation trace
(seeds 1-8) and played backwards (`scripts/reverse_trace.py`), and the shapes of
`scripts/unseen_traffic.py` (stop 42's set, seeds 1-3; stop 49's set, seeds 1-3), each at
x20 and x30. Traces are written once under OUT/traces. Each cell's report goes to
OUT/runs/CELL.json and the table to OUT/cells.json.

Targets (issue 10): attainment at least the best baseline's, at least 99 % where the oracle
reaches 99.5 %, replica-seconds at most 1.2x the oracle's. The oracle runs in each cell's
own report; the best baseline's attainment is read from the recorded tables
(docs/bench/scaler-bursty/stop42/cells.json and stop49/shapes.json: `inferbus sim --policy
all` on the same cells), since a change to `slo` does not move the baselines. A line per
cell shows progress; `--compare` names the cells whose numbers moved against an older
OUT/cells.json.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CONV = ROOT.parent / "shared" / "traces" / "azure_llm_conv_2023.csv"
RECORDED = ROOT / "docs" / "bench" / "scaler-bursty"
FAMILIES = ("on-off", "flash-crowd", "diurnal", "sawtooth", "long-context")
STOP42_SHAPES = ("spikes", "mmpp", "randwalk", "staircase")
STOP49_SHAPES = (
    "steady",
    "ramp",
    "cliff",
    "periodic",
    "pareto",
    "fastwave",
    "doubling",
    "noisy",
    "rare",
)
SCALES = (20, 30)


@dataclass(frozen=True)
class Cell:
    """One trace at one rate scale and seed, in the set it belongs to."""

    shape: str
    seed: int
    scale: int
    set: str

    @property
    def name(self) -> str:
        return f"{self.shape}-s{self.seed}-x{self.scale}"


def cells(which: str) -> list[Cell]:
    """The cells of `which` (stop42: 142, stop49: 54, all: both)."""
    out: list[Cell] = []
    if which in ("all", "stop42"):
        for seed in range(1, 9):
            out += [Cell("conv", seed, x, "tuning") for x in SCALES]
        out += [Cell("conv-reversed", 1, x, "held-out") for x in SCALES]
        for family in FAMILIES:
            for seed in range(1, 11):
                kind = "tuning" if seed <= 8 else "held-out"
                out += [Cell(family, seed, x, kind) for x in SCALES]
        for shape in STOP42_SHAPES:
            for seed in range(1, 4):
                out += [Cell(shape, seed, x, "new-shapes") for x in SCALES]
    if which in ("all", "stop49"):
        for shape in STOP49_SHAPES:
            for seed in range(1, 4):
                out += [Cell(shape, seed, x, "stop49") for x in SCALES]
    return out


def best_baselines() -> dict[str, tuple[float, float]]:
    """Cell name -> (oracle, best baseline) attainment in percent, as recorded."""
    out: dict[str, tuple[float, float]] = {}
    stop42 = json.loads((RECORDED / "stop42" / "cells.json").read_text())["cells"]
    for name, cell in stop42.items():
        out[name] = (cell["oracle_attainment_pct"], cell["best_baseline_attainment_pct"])
    stop49 = json.loads((RECORDED / "stop49" / "shapes.json").read_text())["cells"]
    for name, cell in stop49.items():
        best = max(cell[p]["attainment_pct"] for p in ("hpa-util", "keda-lag"))
        out[name] = (cell["oracle"]["attainment_pct"], best)
    return out


def judge(
    attainment_pct: float, cost: float, oracle_pct: float, best_pct: float
) -> dict[str, bool]:
    """Which of issue 10's targets a cell meets."""
    at_least_best = attainment_pct >= best_pct
    high = oracle_pct < 99.5 or attainment_pct >= 99.0
    return {
        "at_least_best_baseline": at_least_best,
        "every_target": at_least_best and high and cost <= 1.2,
    }


def _run(argv: list[str]) -> None:
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr[-2000:]}")


def _inferbus(*args: str) -> list[str]:
    return [sys.executable, "-c", "from services.cli.main import main; main()", *args]


def trace(cell: Cell, folder: Path) -> Path:
    """The cell's trace CSV, written under `folder` the first time it is asked for."""
    if cell.shape == "conv":
        return CONV
    path = folder / f"{cell.shape}-s{cell.seed}.csv"
    if path.exists():
        return path
    folder.mkdir(parents=True, exist_ok=True)
    if cell.shape == "conv-reversed":
        _run([sys.executable, str(ROOT / "scripts" / "reverse_trace.py"), str(CONV), str(path)])
    elif cell.shape in FAMILIES:
        _run(
            _inferbus("scaler", "traffic", cell.shape, "--out", str(path), "--seed", str(cell.seed))
        )
    else:
        group = "stop49" if cell.shape in STOP49_SHAPES else "stop42"
        script = str(ROOT / "scripts" / "unseen_traffic.py")
        _run([sys.executable, script, str(folder), "--seed", str(cell.seed), "--set", group])
    if not path.exists():
        raise RuntimeError(f"{path} was not written")
    return path


def run_cell(cell: Cell, traces: Path, runs: Path, config: Path | None) -> dict[str, float]:
    """Simulate `slo` (and the oracle) on one cell; its attainment and cost over the oracle."""
    report = runs / f"{cell.name}.json"
    argv = _inferbus(
        "sim", "--policy", "slo", "--trace", str(trace(cell, traces)),
        "--rate-scale", str(cell.scale), "--seed", str(cell.seed), "--json", str(report),
    )  # fmt: skip
    if config is not None:
        argv += ["--config", str(config)]
    _run(argv)
    summaries = {s["policy"]: s for s in json.loads(report.read_text())["summaries"]}
    slo, oracle = summaries["slo"], summaries["oracle"]
    return {
        "attainment_pct": round(100 * slo["attainment"], 3),
        "cost_vs_oracle": round(slo["replica_seconds"] / oracle["replica_seconds"], 4),
        "oracle_attainment_pct": round(100 * oracle["attainment"], 3),
    }


def counts(table: dict[str, dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Per set: cells, at least the best baseline, every target."""
    out: dict[str, dict[str, int]] = {}
    for row in table.values():
        tally = out.setdefault(
            row["set"], {"cells": 0, "at_least_best_baseline": 0, "every_target": 0}
        )
        tally["cells"] += 1
        tally["at_least_best_baseline"] += row["at_least_best_baseline"]
        tally["every_target"] += row["every_target"]
    return out


def moved(old: dict[str, dict[str, Any]], new: dict[str, dict[str, Any]]) -> list[str]:
    """Lines for the cells whose attainment or cost moved between two tables."""
    lines = []
    for name, row in new.items():
        before = old.get(name)
        if before is None:
            continue
        a0, c0 = before["attainment_pct"], before["cost_vs_oracle"]
        a1, c1 = row["attainment_pct"], row["cost_vs_oracle"]
        if abs(a1 - a0) > 0.005 or abs(c1 - c0) > 0.0005:
            lines.append(f"{name}: {a0:.2f} % at {c0:.3f}x -> {a1:.2f} % at {c1:.3f}x")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--set", choices=("all", "stop42", "stop49"), default="all")
    parser.add_argument("--only", help="comma list: run the cells whose name contains one")
    parser.add_argument("--config", type=Path, help="PolicyConfig JSON for `inferbus sim`")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--compare", type=Path, help="an older OUT/cells.json")
    args = parser.parse_args()
    chosen = cells(args.set)
    if args.only:
        parts = args.only.split(",")
        chosen = [c for c in chosen if any(p in c.name for p in parts)]
    if not chosen:
        parser.error("no cell matches")
    recorded = best_baselines()
    # Read before this run's table is written: the older table may be the same file.
    old = None if args.compare is None else json.loads(args.compare.read_text())["cells"]
    traces, runs = args.out_dir / "traces", args.out_dir / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    for cell in chosen:  # written once, before the cells that share them run side by side
        trace(cell, traces)
    table: dict[str, dict[str, Any]] = {}
    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
        futures = {pool.submit(run_cell, c, traces, runs, args.config): c for c in chosen}
        for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
            cell = futures[future]
            row: dict[str, Any] = dict(future.result())
            oracle_pct, best_pct = recorded[cell.name]
            row |= {"set": cell.set, "best_baseline_attainment_pct": best_pct}
            row |= judge(row["attainment_pct"], row["cost_vs_oracle"], oracle_pct, best_pct)
            table[cell.name] = row
            print(
                f"[{done}/{len(chosen)} {time.monotonic() - started:.0f} s] {cell.name}: "
                f"{row['attainment_pct']:.2f} % at {row['cost_vs_oracle']:.3f}x"
                f"{'' if row['every_target'] else ' (misses a target)'}",
                flush=True,
            )
    table = dict(sorted(table.items()))
    tallies = counts(table)
    result = {
        "command": " ".join(sys.argv),
        "config": None if args.config is None else json.loads(args.config.read_text()),
        "counts": tallies,
        "cells": table,
    }
    (args.out_dir / "cells.json").write_text(json.dumps(result, indent=1) + "\n")
    for kind, tally in tallies.items():
        print(f"{kind}: {tally}")
    if old is not None:
        lines = moved(old, table)
        print(f"{len(lines)} cells moved against {args.compare}")
        print("\n".join(lines))


if __name__ == "__main__":
    main()

"""A/B pairs of `bench throughput` reports (scripts/ab_throughput.sh): one summary, one plot.

python -m services.bench.ab OUTDIR      # reads OUTDIR/{A,B}N.json, writes ab.json, ab.png

Exit 2 on a usage error (no OUTDIR, or not a folder); exit 1 when no pair is complete.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

BUS = ("broker", "ingest", "loadgen")
"""The bus's processes whose CPU a request each side is compared on."""


def run_figures(report: dict[str, Any]) -> dict[str, float | None]:
    """What one run is compared on: samples/s raw and end to end, the ratio, and the CPU
    ms a request of the broker, ingest (all instances) and the load generator. The broker
    is None in a run against an outside Kafka (--bootstrap): its CPU was not measured."""
    saturation = report["saturation"]
    cpu = saturation["cpu"]["cpu_ms_per_request"]
    return {
        "raw_samples_per_s": report["raw_engine"]["samples_per_s"],
        "e2e_samples_per_s": saturation["samples_per_s"],
        "ratio": report["ratio_e2e_over_raw"],
        "broker": cpu.get("broker"),
        "ingest": sum(v for k, v in cpu.items() if re.fullmatch(r"ingest-\d+", k)),
        "loadgen": cpu["loadgen"],
    }


def _over(b: float | None, a: float | None) -> float | None:
    """B ÷ A, or None where a side has no figure (a `null` or `sim` run has no ratio)."""
    return b / a if a and b is not None else None


def summarize(reports: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Pairs from reports named `A1`, `B1`, ...: each pair's figures and B's change over A
    (B ÷ A), pair by pair; pairs missing a side are left out and named."""
    pairs, incomplete = [], []
    numbers = sorted({int(name[1:]) for name in reports if re.fullmatch(r"[AB]\d+", name)})
    for n in numbers:
        a, b = reports.get(f"A{n}"), reports.get(f"B{n}")
        if a is None or b is None:
            incomplete.append(n)
            continue
        fa, fb = run_figures(a), run_figures(b)
        change = {k: _over(fb[k], fa[k]) for k in fa}
        pairs.append({"pair": n, "A": fa, "B": fb, "B_over_A": change})
    return {"pairs": pairs, "incomplete_pairs": incomplete}


def main(outdir: Path) -> dict[str, Any]:
    """Summarize OUTDIR's pairs into OUTDIR/ab.json, and plot them into OUTDIR/ab.png."""
    from services.bench.plot import plot_ab

    reports = {path.stem: json.loads(path.read_text()) for path in outdir.glob("[AB]*.json")}
    summary = summarize(reports)
    (outdir / "ab.json").write_text(json.dumps(summary, indent=2))
    if summary["pairs"]:
        plot_ab(summary, outdir / "ab.png")
    return summary


def cli(argv: list[str] | None = None) -> int:
    """`python -m services.bench.ab OUTDIR`: one line a pair; the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m services.bench.ab",
        description="Summarize the A/B pairs of scripts/ab_throughput.sh: ab.json, ab.png.",
    )
    parser.add_argument("outdir", type=Path, help="the folder of A1.json, B1.json, ...")
    outdir = parser.parse_args(argv).outdir
    if not outdir.is_dir():
        parser.error(f"OUTDIR {outdir} is not a folder")
    done = main(outdir)
    for pair in done["pairs"]:
        change = ", ".join(f"{k} ×{v:.2f}" for k, v in pair["B_over_A"].items() if v is not None)
        print(f"pair {pair['pair']}: B ÷ A: {change}")
    if done["incomplete_pairs"]:
        print(f"incomplete pairs (a side failed): {done['incomplete_pairs']}")
    if not done["pairs"]:
        print(
            f"error: no complete A/B pair in {outdir} (A1.json with B1.json, ...)", file=sys.stderr
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(cli())

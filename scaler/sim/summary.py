"""One table over many `inferbus sim --json` reports: attainment, cost over the oracle, actions."""

from __future__ import annotations

import gzip
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scaler.sim.workload import WorkloadError

POLICY_ORDER = ("oracle", "slo", "hpa-util", "keda-lag")


@dataclass(frozen=True)
class Cell:
    """One policy on one report and tier."""

    attainment: float
    cost_ratio: float
    actions: int


@dataclass(frozen=True)
class Row:
    """One report (a workload at one rate scale) and tier."""

    source: str
    tier: str
    cells: dict[str, Cell]

    def misses(self) -> list[str]:
        """Which targets slo misses: below a baseline, below 99 % (oracle >= 99.5 %), > 1.2x."""
        slo, oracle = self.cells.get("slo"), self.cells.get("oracle")
        if slo is None or oracle is None:
            return ["no slo or oracle run"]
        out = []
        baselines = {p: c for p, c in self.cells.items() if p not in ("slo", "oracle")}
        best = max(baselines.items(), key=lambda pc: pc[1].attainment, default=None)
        if best is not None and slo.attainment < best[1].attainment:
            out.append(f"below {best[0]}")
        if oracle.attainment >= 0.995 and slo.attainment < 0.99:
            out.append("below 99 %")
        if slo.cost_ratio > 1.2:
            out.append(f"cost {slo.cost_ratio:.3f}×")
        return out


def _read(path: Path) -> dict[str, Any]:
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt") as handle:
            data: dict[str, Any] = json.load(handle)
    except (OSError, json.JSONDecodeError) as exc:
        raise WorkloadError(f"cannot read report {path}: {exc}", path=str(path)) from exc
    return data


def rows(path: Path) -> list[Row]:
    """The rows of one report, one per tier."""
    data = _read(path)
    out = []
    for tier in sorted({s["tier"] for s in data["summaries"]}):
        summaries = [s for s in data["summaries"] if s["tier"] == tier]
        base = next(s["replica_seconds"] for s in summaries if s["policy"] == "oracle")
        cells = {
            s["policy"]: Cell(
                attainment=s["attainment"],
                cost_ratio=s["replica_seconds"] / base if base else float("nan"),
                actions=s["actions"],
            )
            for s in summaries
        }
        out.append(Row(source=data["source"], tier=tier, cells=cells))
    return out


def markdown(table: Sequence[Row]) -> str:
    """A markdown table: per policy `attainment, cost ×, actions`, and which targets slo misses."""
    policies = [p for p in POLICY_ORDER if any(p in r.cells for r in table)]
    head = "| workload | tier | " + " | ".join(policies) + " | targets |"
    rule = "|---|---|" + "---|" * len(policies) + "---|"
    lines = [head, rule]
    for r in table:
        cells = []
        for p in policies:
            c = r.cells.get(p)
            if c is None:
                cells.append("—")
            elif p == "oracle":
                cells.append(f"{c.attainment:.2%} ({c.actions})")
            else:
                cells.append(f"{c.attainment:.2%}, {c.cost_ratio:.2f}× ({c.actions})")
        misses = r.misses()
        verdict = "met" if not misses else "missed: " + ", ".join(misses)
        lines.append(f"| {r.source} | {r.tier} | " + " | ".join(cells) + f" | {verdict} |")
    return "\n".join(lines)

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


_SUMMARY_KEYS = frozenset({"tier", "policy", "attainment", "replica_seconds", "actions"})


def _read(path: Path) -> dict[str, Any]:
    """A report `inferbus sim --json` wrote, or a WorkloadError saying why it is not one."""
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as handle:
            data: Any = json.load(handle)
    except (OSError, EOFError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise WorkloadError(f"cannot read report {path}: {exc}") from exc
    summaries = data.get("summaries") if isinstance(data, dict) else None
    if (
        not isinstance(summaries, list)
        or not isinstance(data.get("source"), str)
        or not all(isinstance(s, dict) and set(s) >= _SUMMARY_KEYS for s in summaries)
    ):
        raise WorkloadError(
            f"{path} is not a report of `inferbus sim --json` (no 'source' and 'summaries')"
        )
    for index, summary in enumerate(summaries):
        wrong = [k for k in _NUMBERS if not _is_number(summary[k])]
        wrong += [k for k in ("policy", "tier") if not isinstance(summary[k], str)]
        if wrong:
            raise WorkloadError(
                f"{path}: summary {index} ({summary.get('policy')!r}) has {', '.join(wrong)} "
                "of the wrong type (numbers, and strings for policy and tier)"
            )
    report: dict[str, Any] = data
    return report


_NUMBERS = ("attainment", "replica_seconds", "actions")


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def rows(path: Path) -> list[Row]:
    """The rows of one report, one per tier."""
    data = _read(path)
    out = []
    for tier in sorted({s["tier"] for s in data["summaries"]}):
        summaries = [s for s in data["summaries"] if s["tier"] == tier]
        base = next((s["replica_seconds"] for s in summaries if s["policy"] == "oracle"), None)
        if base is None:
            raise WorkloadError(
                f"{path}: no oracle run for tier {tier} (run `inferbus sim` with "
                "`--policy all` or one that includes the oracle)"
            )
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
    lines.append("")
    lines.append(TARGETS_NOTE)
    return "\n".join(lines)


TARGETS_NOTE = (
    "Cells: SLO attainment, replica-seconds over the oracle's, (scale actions). Targets for "
    "slo: attainment at least the best baseline's; at least 99 % where the oracle reaches "
    "99.5 % (below that, the oracle itself shows the traffic cannot be met, and the baseline "
    "is the bar); replica-seconds at most 1.2x the oracle's."
)

"""Plot runs of `scripts/scaler_cells.py` against each other: mean attainment over mean cost.

    python scripts/cells_frontier.py OUT.png LABEL=CELLS.json [LABEL=CELLS.json ...]
                                     [--json OUT.json]

One panel per group of cells (tuning, held out, new shapes, stop 49's shapes, the Azure code
trace); each run is a point at its cells' mean replica-seconds over the oracle's (x) and
mean SLO attainment (y), labelled with how many cells met every target. Two configurations
on one line through a third are the same trade, not a better one (docs/benchmarks.md,
"Stop 52"). The means and counts also go to `--json`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

GROUPS = ("tuning", "held-out", "new-shapes", "stop49", "real-held-out")
MARKERS = ("o", "s", "^", "D", "v", "P")


JUDGED = ("group", "attainment_pct", "cost_vs_oracle", "every_target")
"""The fields of a judged cell; a cell that failed has `group` and `error` instead."""


@dataclass(frozen=True)
class GroupMeans:
    """One run's cells of one group, summed up; the means are over the judged cells."""

    cells: int
    failed: int
    mean_attainment_pct: float
    mean_cost_vs_oracle: float
    every_target: int


def summarize(table: dict[str, dict[str, Any]]) -> dict[str, GroupMeans]:
    """Per group of a cells.json table's `cells`: the means and the every-target count.

    A group whose cells all failed has no means: it is refused, not plotted as 0 %."""
    by_group: dict[str, list[dict[str, Any]]] = {}
    for cell in table.values():
        by_group.setdefault(cell["group"], []).append(cell)
    out: dict[str, GroupMeans] = {}
    for group, cells in sorted(by_group.items()):
        judged = [c for c in cells if "error" not in c]
        if not judged:
            raise ValueError(f"every cell of {group!r} failed: nothing to average")
        out[group] = GroupMeans(
            cells=len(cells),
            failed=len(cells) - len(judged),
            mean_attainment_pct=statistics.fmean(c["attainment_pct"] for c in judged),
            mean_cost_vs_oracle=statistics.fmean(c["cost_vs_oracle"] for c in judged),
            every_target=sum(1 for c in judged if c["every_target"]),
        )
    return out


def labelled(arg: str) -> tuple[str, Path]:
    """`LABEL=PATH` -> (LABEL, PATH)."""
    label, sep, path = arg.partition("=")
    if not sep or not label or not path:
        raise argparse.ArgumentTypeError(f"{arg!r}: want LABEL=CELLS.json")
    return label, Path(path)


def read_cells(path: Path) -> dict[str, dict[str, Any]]:
    """The `cells` of a `scripts/scaler_cells.py` table, with a clear error if it is not one."""
    try:
        cells = json.loads(path.read_text())["cells"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SystemExit(f"{path}: not a scaler_cells.py table ({exc!r})") from exc
    if not isinstance(cells, dict):
        raise SystemExit(f"{path}: `cells` is not a table of cells by name")
    if not cells:
        raise SystemExit(f"{path}: no cells")
    for name, cell in cells.items():
        wanted = ("group", "error") if isinstance(cell, dict) and "error" in cell else JUDGED
        if not isinstance(cell, dict) or any(k not in cell for k in wanted):
            raise SystemExit(f"{path}: cell {name!r} is not a judged or failed cell: {cell!r}")
    return cells


def plot(runs: dict[str, dict[str, GroupMeans]], out: Path) -> None:
    """One panel per group; a point per run (the legend names it), marked with its count."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = [g for g in GROUPS if any(g in r for r in runs.values())]
    groups += sorted({g for r in runs.values() for g in r} - set(groups))
    fig, axes = plt.subplots(1, len(groups), figsize=(4.2 * len(groups), 4.2), squeeze=False)
    for ax, group in zip(axes[0], groups, strict=True):
        for i, (label, summary) in enumerate(runs.items()):
            means = summary.get(group)
            if means is None:
                continue
            x, y = means.mean_cost_vs_oracle, means.mean_attainment_pct
            ax.plot(x, y, MARKERS[i % len(MARKERS)], color=f"C{i}", label=label)
            ax.annotate(
                f"{means.every_target}/{means.cells}",
                (x, y),
                textcoords="offset points",
                xytext=(5, -3),
                fontsize=7,
                color=f"C{i}",
            )
        ax.set_title(f"{group} (n/N: cells meeting every target)", fontsize=9)
        ax.set_xlabel("mean replica-seconds / oracle")
        ax.margins(0.25)
    axes[0][0].set_ylabel("mean SLO attainment %")
    axes[0][0].legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_png", type=Path)
    parser.add_argument("runs", type=labelled, nargs="+", metavar="LABEL=CELLS.json")
    parser.add_argument("--json", type=Path, help="write the means and counts here")
    args = parser.parse_args(argv)
    labels = [label for label, _ in args.runs]
    if len(set(labels)) != len(labels):
        parser.error(f"labels repeat: {labels}")
    runs: dict[str, dict[str, GroupMeans]] = {}
    for label, path in args.runs:
        try:
            runs[label] = summarize(read_cells(path))
        except ValueError as exc:
            raise SystemExit(f"{path}: {exc}") from exc
    for label, summary in runs.items():
        for group, m in summary.items():
            print(
                f"{label:>16} {group:>10}: {m.mean_attainment_pct:.3f} % at "
                f"{m.mean_cost_vs_oracle:.4f}x, every target {m.every_target}/{m.cells}"
                + (f" ({m.failed} failed, not in the means)" if m.failed else "")
            )
    plot(runs, args.out_png)
    print(f"wrote {args.out_png}")
    if args.json is not None:
        data = {label: {g: asdict(m) for g, m in s.items()} for label, s in runs.items()}
        args.json.write_text(json.dumps(data, indent=1) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

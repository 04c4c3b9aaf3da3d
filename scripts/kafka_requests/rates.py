"""Requests a second per process and kind over the busiest window of a counted run.

    python scripts/kafka_requests/rates.py DIR [--window-s 10] [--top 8]

DIR holds the <pid>.jsonl files that `sitecustomize.py` beside this script wrote. The
window is the one in which all processes together sent the most requests.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def _load(folder: Path) -> dict[str, list[dict[str, Any]]]:
    runs = {}
    for path in sorted(folder.glob("*.jsonl")):
        rows = [json.loads(line) for line in path.read_text().splitlines() if line]
        if rows:
            runs[f"{path.stem} {rows[0]['argv']}"] = rows
    return runs


def _at(rows: list[dict[str, Any]], t: float) -> dict[str, int]:
    last: dict[str, int] = {}
    for row in rows:
        if row["t"] <= t:
            last = row["counts"]
    return last


def _busiest(runs: dict[str, list[dict[str, Any]]], window_s: float) -> tuple[float, float]:
    times = sorted({row["t"] for rows in runs.values() for row in rows})
    best = (0, times[0], times[0] + window_s)
    for start in times:
        end = start + window_s
        if end > times[-1]:
            break
        total = sum(
            sum(_at(rows, end).values()) - sum(_at(rows, start).values()) for rows in runs.values()
        )
        if total > best[0]:
            best = (total, start, end)
    return best[1], best[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--window-s", type=float, default=10.0)
    parser.add_argument("--top", type=int, default=8)
    args = parser.parse_args()
    runs = _load(args.folder)
    if not runs:
        raise SystemExit(f"no <pid>.jsonl files in {args.folder}")
    start, end = _busiest(runs, args.window_s)
    print(f"busiest {args.window_s:.0f} s window")
    for name, rows in runs.items():
        before, after = _at(rows, start), _at(rows, end)
        rates = {k: (v - before.get(k, 0)) / args.window_s for k, v in after.items()}
        rates = {k: r for k, r in rates.items() if r > 0}
        print(f"{name[:70]}: {sum(rates.values()):.1f} requests/s")
        for kind, rate in sorted(rates.items(), key=lambda kv: -kv[1])[: args.top]:
            print(f"    {rate:8.1f}  {kind}")


if __name__ == "__main__":
    main()

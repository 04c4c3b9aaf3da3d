"""Write the first minutes of a trace CSV: what a causal policy loses up to a moment.

    python scripts/cut_trace.py SOURCE.csv TARGET.csv MINUTES

A policy sees only the past, so its decisions up to minute M are the same on the whole
trace and on its first M minutes. `inferbus sim --trace TARGET.csv --initial-replicas N`
(N as in the whole run, where the oracle's start would differ) then counts the late
requests up to M: for example what the first burst of a trace costs before any policy
could have seen one (docs/benchmarks.md, "Stop 43").
"""

from __future__ import annotations

import csv
import sys
from datetime import datetime, timedelta
from pathlib import Path


def cut(source: Path, target: Path, minutes: float) -> int:
    """Write the rows of `source` within `minutes` of its first to `target`; returns them."""
    with source.open(newline="") as handle:
        header, *rows = list(csv.reader(handle))
    if not rows:
        return 0
    first = min(datetime.fromisoformat(row[0]) for row in rows)
    end = first + timedelta(minutes=minutes)
    kept = [row for row in rows if datetime.fromisoformat(row[0]) < end]
    with target.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(kept)
    return len(kept)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit("usage: python scripts/cut_trace.py SOURCE.csv TARGET.csv MINUTES")
    written = cut(Path(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3]))
    print(f"{written} requests written to {sys.argv[2]}")

"""Write a trace CSV played backwards in time: a held-out shape for `inferbus sim --trace`.

    python scripts/reverse_trace.py ../shared/traces/azure_llm_conv_2023.csv /tmp/conv-reversed.csv

Each request keeps its token counts and moves to (last + first - its time): rises become
falls and the trace's burst order is new to a policy tuned on the original.
"""

from __future__ import annotations

import csv
import sys
from datetime import datetime
from pathlib import Path

FORMAT = "%Y-%m-%d %H:%M:%S.%f"


def reverse(source: Path, target: Path) -> int:
    """Write `source` reversed to `target`; returns the requests written."""
    with source.open(newline="") as handle:
        header, *rows = list(csv.reader(handle))
    times = [datetime.strptime(row[0][:26], FORMAT) for row in rows]
    first, last = min(times), max(times)
    moved = sorted(zip((first + (last - t) for t in times), rows, strict=True), key=lambda p: p[0])
    with target.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        for when, row in moved:
            writer.writerow([when.strftime(FORMAT), *row[1:]])
    return len(moved)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python scripts/reverse_trace.py SOURCE.csv TARGET.csv")
    print(f"{reverse(Path(sys.argv[1]), Path(sys.argv[2]))} requests written to {sys.argv[2]}")

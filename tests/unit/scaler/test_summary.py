"""`inferbus scaler table`: one table over sim reports, naming the targets slo misses."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from scaler.sim.summary import markdown, rows


def test_table_names_missed_targets(tmp_path: Path) -> None:
    def summary(policy: str, attainment: float, cost: float) -> dict[str, object]:
        return {
            "policy": policy,
            "tier": "interactive",
            "attainment": attainment,
            "replica_seconds": cost,
            "actions": 3,
        }

    report = {
        "source": "trace t.csv x20",
        "summaries": [
            summary("oracle", 0.996, 100.0),
            summary("slo", 0.985, 125.0),
            summary("hpa-util", 0.99, 110.0),
        ],
    }
    path = tmp_path / "r.json.gz"
    path.write_bytes(gzip.compress(json.dumps(report).encode()))
    (row,) = rows(path)
    assert row.misses() == ["below hpa-util", "below 99 %", "cost 1.250×"]
    assert "98.50%, 1.25× (3)" in markdown([row])

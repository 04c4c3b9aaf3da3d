"""`inferbus scaler table`: one table over sim reports, naming the targets slo misses."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from scaler.sim.summary import markdown, rows
from scaler.sim.workload import WorkloadError


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


@pytest.mark.parametrize(
    ("field", "value"),
    [("attainment", "99%"), ("replica_seconds", None), ("actions", True), ("tier", 3)],
)
def test_a_report_with_a_field_of_the_wrong_type_is_refused(
    tmp_path: Path, field: str, value: object
) -> None:
    summary = {"policy": "oracle", "tier": "interactive", "attainment": 0.99}
    summary |= {"replica_seconds": 10.0, "actions": 1, field: value}
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"source": "t", "summaries": [summary]}))
    with pytest.raises(WorkloadError, match=f"summary 0 \\('oracle'\\) has {field} of the wrong"):
        rows(path)

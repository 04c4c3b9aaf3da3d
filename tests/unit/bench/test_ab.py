"""A/B pairs of throughput reports: figures per run, B ÷ A per pair."""

from __future__ import annotations

from typing import Any

import pytest

from services.bench.ab import run_figures, summarize


def _report(e2e: float, broker: float, ingest: dict[str, float]) -> dict[str, Any]:
    cpu = {"broker": broker, "loadgen": 0.5, "worker-m-0": 4.0, **ingest}
    return {
        "raw_engine": {"samples_per_s": 200.0},
        "ratio_e2e_over_raw": e2e / 200.0,
        "saturation": {"samples_per_s": e2e, "cpu": {"cpu_ms_per_request": cpu}},
    }


@pytest.mark.parametrize(
    ("ingest", "expected"),
    [
        pytest.param({"ingest-0": 0.6}, 0.6, id="one-instance"),
        pytest.param({"ingest-0": 0.3, "ingest-1": 0.2}, 0.5, id="instances-add-up"),
        pytest.param({}, 0.0, id="no-ingest"),
    ],
)
def test_ingest_counts_every_instance(ingest: dict[str, float], expected: float) -> None:
    assert run_figures(_report(100.0, 1.0, ingest))["ingest"] == pytest.approx(expected)


def test_pairs_compare_b_over_a_and_name_the_incomplete() -> None:
    reports = {
        "A1": _report(100.0, 2.0, {"ingest-0": 1.0}),
        "B1": _report(110.0, 1.0, {"ingest-0": 0.5}),
        "B2": _report(120.0, 1.0, {"ingest-0": 0.5}),
        "ab": {"not": "a run"},
    }
    summary = summarize(reports)
    [pair] = summary["pairs"]
    assert pair["pair"] == 1
    assert pair["B_over_A"]["e2e_samples_per_s"] == pytest.approx(1.1)
    assert pair["B_over_A"]["broker"] == pytest.approx(0.5)
    assert summary["incomplete_pairs"] == [2]


def test_runs_without_a_ratio_compare_on_the_rest() -> None:
    """`null` and `sim` runs have no ratio (nothing a user gets without us to divide by)."""
    a, b = _report(100.0, 2.0, {"ingest-0": 1.0}), _report(110.0, 1.0, {"ingest-0": 0.5})
    a["ratio_e2e_over_raw"] = b["ratio_e2e_over_raw"] = None
    [pair] = summarize({"A1": a, "B1": b})["pairs"]
    assert pair["B_over_A"]["ratio"] is None
    assert pair["B_over_A"]["e2e_samples_per_s"] == pytest.approx(1.1)

"""A/B pairs of throughput reports: figures per run, B ÷ A per pair."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from services.bench.ab import cli, run_figures, summarize


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


def test_a_run_against_an_outside_kafka_has_no_broker_figure() -> None:
    """`--bootstrap` runs measure no embedded broker: it once ended in KeyError 'broker'."""
    a, b = _report(100.0, 2.0, {"ingest-0": 1.0}), _report(110.0, 1.0, {"ingest-0": 0.5})
    for report in (a, b):
        del report["saturation"]["cpu"]["cpu_ms_per_request"]["broker"]
    [pair] = summarize({"A1": a, "B1": b})["pairs"]
    assert pair["A"]["broker"] is None
    assert pair["B_over_A"]["broker"] is None
    assert pair["B_over_A"]["ingest"] == pytest.approx(0.5)


@pytest.mark.parametrize(
    "argv", [pytest.param([], id="no-outdir"), pytest.param(["/nonexistent/ab"], id="no-folder")]
)
def test_a_usage_error_exits_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli(argv)
    assert exit_.value.code == 2
    assert "outdir" in capsys.readouterr().err.lower()


def test_no_complete_pair_exits_1_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "B1.json").write_text(json.dumps(_report(110.0, 1.0, {"ingest-0": 0.5})))
    assert cli([str(tmp_path)]) == 1
    said = capsys.readouterr()
    assert "incomplete pairs (a side failed): [1]" in said.out
    assert "no complete A/B pair" in said.err


def test_complete_pairs_exit_0_with_a_line_each(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, e2e in (("A1", 100.0), ("B1", 110.0)):
        (tmp_path / f"{name}.json").write_text(json.dumps(_report(e2e, 1.0, {"ingest-0": 0.5})))
    assert cli([str(tmp_path)]) == 0
    assert (
        "pair 1: B ÷ A: raw_samples_per_s ×1.00, e2e_samples_per_s ×1.10" in capsys.readouterr().out
    )
    assert (tmp_path / "ab.json").is_file() and (tmp_path / "ab.png").is_file()

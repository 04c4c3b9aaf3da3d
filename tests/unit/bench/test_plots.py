"""Plots are PNG files written at exactly the path given: `--plot out.txt` once ended a
whole run in matplotlib's "Format 'txt' is not supported", and `--plot out` wrote
`out.png` while the bench said it wrote `out`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from services.bench.plot import plot_ab, plot_buckets, plot_throughput

PNG = b"\x89PNG\r\n\x1a\n"


def _throughput() -> dict[str, Any]:
    return {
        "model": "demo-encoder",
        "seq_len": 32,
        "engine": "model",
        "raw_engine": {"samples_per_s": 200.0},
        "saturation": {"samples_per_s": 180.0, "batch_sizes": {"16": 10, "32": 90}},
        "ratio_e2e_over_raw": 0.9,
    }


def _buckets() -> dict[str, Any]:
    return {
        "with_buckets": {"samples_per_s": 90.0},
        "one_bucket": {"samples_per_s": 15.0},
        "mix": {"short_len": 32, "long_len": 512, "long_share": 0.1},
    }


@pytest.mark.parametrize("name", ["out", "out.txt", "out.png"])
def test_each_plot_is_a_png_at_the_path_given(tmp_path: Path, name: str) -> None:
    for plot, report in ((plot_throughput, _throughput()), (plot_buckets, _buckets())):
        path = tmp_path / f"{plot.__name__}-{name}"
        plot(report, path)
        assert path.read_bytes().startswith(PNG)
    assert not list(tmp_path.glob("*.png.png"))


def test_an_ab_plot_draws_a_run_without_broker_cpu(tmp_path: Path) -> None:
    """A run against an outside Kafka measured no broker: its bar is left out."""
    figures = {"e2e_samples_per_s": 100.0, "broker": None, "ingest": 0.5, "loadgen": 0.2}
    pairs = [{"pair": 1, "A": figures, "B": {**figures, "broker": 0.3}}]
    path = tmp_path / "ab.png"
    plot_ab({"pairs": pairs, "incomplete_pairs": []}, path)
    assert path.read_bytes().startswith(PNG)

"""PNG plots of benchmark reports: each written as PNG at the path given, whatever its
suffix (matplotlib would refuse `.txt` after a whole run, and write `out` as `out.png`)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def plot_throughput(report: dict[str, Any], path: Path) -> None:
    """Throughput bars (raw vs end to end) and the batch-size histogram."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    raw = report["raw_engine"]["samples_per_s"]
    e2e = report["saturation"]["samples_per_s"]
    left.bar(["raw engine", "end to end"], [raw, e2e], color=["#777", "#2a7"])
    left.set_ylabel("samples / s")
    ratio = report["ratio_e2e_over_raw"]
    said = f"ratio {ratio:.2f}" if ratio is not None else f"{report['engine']} engine, no ratio"
    left.set_title(f"{report['model']} seq {report['seq_len']}: {said}")
    sizes = report["saturation"]["batch_sizes"]
    right.bar(list(sizes), list(sizes.values()), color="#27a")
    right.set_xlabel("batch size")
    right.set_ylabel("requests")
    right.set_title("batch sizes at saturation")
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)


def plot_buckets(report: dict[str, Any], path: Path) -> None:
    """Throughput with and without length buckets."""
    fig, ax = plt.subplots(figsize=(6, 4))
    values = [report["with_buckets"]["samples_per_s"], report["one_bucket"]["samples_per_s"]]
    ax.bar(["length buckets", "one bucket"], values, color=["#2a7", "#a72"])
    ax.set_ylabel("requests / s")
    mix = report["mix"]
    short = f"{1 - mix['long_share']:.0%} × {mix['short_len']}"
    long = f"{mix['long_share']:.0%} × {mix['long_len']}"
    ax.set_title(f"{short} + {long} tokens")
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)


def _figures(pairs: list[dict[str, Any]], side: str, key: str) -> list[float]:
    """One side's figure per pair; NaN (no bar) where it has none (a run against an outside
    Kafka has no broker CPU)."""
    return [math.nan if p[side][key] is None else p[side][key] for p in pairs]


def plot_ab(summary: dict[str, Any], path: Path) -> None:
    """A/B pairs: end-to-end samples/s, and the bus's CPU ms a request, per pair."""
    from services.bench.ab import BUS

    pairs = summary["pairs"]
    fig, axes = plt.subplots(1, 1 + len(BUS), figsize=(4 * (1 + len(BUS)), 3.6))
    labels = [str(p["pair"]) for p in pairs]
    width = 0.38
    xs = range(len(pairs))
    for ax, key, title in zip(
        axes,
        ("e2e_samples_per_s", *BUS),
        ("end to end, samples/s", *(f"{name}, CPU ms a request" for name in BUS)),
        strict=True,
    ):
        a_side, b_side = _figures(pairs, "A", key), _figures(pairs, "B", key)
        ax.bar([x - width / 2 for x in xs], a_side, width, label="A (base)")
        ax.bar([x + width / 2 for x in xs], b_side, width, label="B (change)")
        ax.set_xticks(list(xs), labels)
        ax.set_xlabel("pair")
        ax.set_title(title)
    axes[0].legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)

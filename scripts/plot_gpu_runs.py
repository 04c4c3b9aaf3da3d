"""One PNG of the H200 runs in docs/bench/gpu: samples/s against raw ONNX Runtime, GPU busy.

    python scripts/plot_gpu_runs.py docs/bench/gpu docs/bench/gpu/h200.png

Each run's end-to-end JSON (`runN-e2e-IxW.json`, from `inferbus bench throughput`) is set
beside the raw ONNX Runtime CUDA reference measured in the same run (`runN-raw.json`, the
GPU kit's raw_ref.py), and its nvidia-smi samples (`.smi.csv`, % busy every 0.5 s).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def main(folder: Path, out: Path) -> None:
    runs = sorted(folder.glob("run*-[em]*-*x*.json"))
    fig, (bars, busy) = plt.subplots(1, 2, figsize=(13, 4.5))
    labels, raw, e2e = [], [], []
    for path in runs:
        run = path.name.split("-")[0]
        report = json.loads(path.read_text())
        reference = json.loads((folder / f"{run}-raw.json").read_text())
        mps = " MPS" if "mps" in path.stem else ""
        labels.append(
            f"{run}{mps}\n{report['ingest_instances']} ingest\n{report['workers']} workers"
        )
        results = reference["results"]
        raw.append(
            max(results[k]["samples_per_s"] for k in ("ort_cuda_numpy", "ort_cuda_iobinding"))
        )
        e2e.append(report["saturation"]["samples_per_s"])
        smi = path.with_suffix(".smi.csv")
        if smi.exists():
            values = [float(line.split(",")[0]) for line in smi.read_text().split("\n") if line]
            busy.plot([i * 0.5 for i in range(len(values))], values, label=path.stem)
    x = range(len(labels))
    bars.bar(
        [i - 0.2 for i in x],
        raw,
        0.4,
        label="raw ORT CUDA EP, best of numpy / IOBinding (same run)",
        color="#777",
    )
    bars.bar([i + 0.2 for i in x], e2e, 0.4, label="inferbus end to end", color="#2a7")
    for i, (r, e) in enumerate(zip(raw, e2e, strict=True)):
        bars.text(i + 0.2, e, f"{e / r:.2f}", ha="center", va="bottom")
    bars.set_xticks(list(x), labels, fontsize=8)
    bars.set_ylabel("samples / s (MiniLM, seq 32)")
    bars.set_title("H200: end to end ÷ raw ONNX Runtime")
    bars.legend(fontsize=8)
    busy.set_xlabel("seconds (raw engine, saturation, half load)")
    busy.set_ylabel("GPU busy %")
    busy.set_title("nvidia-smi utilization")
    busy.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=100)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))

"""Throughput of demo-encoder on CPU, CUDA EP, TensorRT EP and native TensorRT; writes JSON.

Run by scripts/gpu_check; usable alone: python scripts/gpu_bench.py --out bench.json
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from infra.models.repository import ModelRepository, ModelVersion  # noqa: E402
from schemas.errors import InferbusError  # noqa: E402
from services.models.demo import ENCODER, write_demo_models  # noqa: E402
from services.worker.engines.base import Engine  # noqa: E402
from services.worker.engines.factory import create_engine  # noqa: E402
from services.worker.engines.shapes import sample_batch  # noqa: E402

BACKENDS: dict[str, dict[str, Any]] = {
    "cpu": {"kind": "onnxruntime", "providers": ["cpu"], "intra_op_num_threads": 0},
    "cuda-ep": {"kind": "onnxruntime", "providers": ["cuda"]},
    "tensorrt-ep": {"kind": "onnxruntime", "providers": ["tensorrt"]},
    "tensorrt-ep-fp16": {"kind": "onnxruntime", "providers": ["tensorrt"], "fp16": True},
    "tensorrt-native": {"kind": "tensorrt"},
    "tensorrt-native-fp16": {"kind": "tensorrt", "fp16": True},
}
EXPECTED_PROVIDER = {
    "cpu": "CPUExecutionProvider",
    "cuda-ep": "CUDAExecutionProvider",
    "tensorrt-ep": "TensorrtExecutionProvider",
    "tensorrt-ep-fp16": "TensorrtExecutionProvider",
}
"""A backend that runs on another provider than this one fell back: an error, never `ok`."""


def _version(root: Path, cache: Path, engine: dict[str, Any], backend: str) -> ModelVersion:
    base = root / backend
    if not base.exists():
        shutil.copytree(root / "src" / ENCODER, base / ENCODER)
    path = base / ENCODER / "model.yaml"
    raw = yaml.safe_load(path.read_text())
    raw["engine"].update({"engine_cache_dir": str(cache), **engine})
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return ModelRepository(base).resolve(ENCODER)


def _throughput(engine: Engine, feed: dict[str, np.ndarray], seconds: float) -> dict[str, float]:
    engine.infer(feed)
    batch = next(iter(feed.values())).shape[0]
    runs, times = 0, []
    started = time.perf_counter()
    while time.perf_counter() - started < seconds or runs < 3:
        t0 = time.perf_counter()
        engine.infer(feed)
        times.append(time.perf_counter() - t0)
        runs += 1
    elapsed = time.perf_counter() - started
    return {
        "samples_per_s": round(runs * batch / elapsed, 1),
        "batch_ms_p50": round(float(np.percentile(times, 50)) * 1000, 3),
        "batch_ms_p99": round(float(np.percentile(times, 99)) * 1000, 3),
        "runs": runs,
    }


def run(seconds: float, seqs: list[int], batch: int) -> dict[str, Any]:
    import onnxruntime as ort

    if hasattr(ort, "preload_dlls"):
        ort.preload_dlls()  # CUDA/cuDNN from the nvidia-* wheels, where installed that way
    work = Path(tempfile.mkdtemp(prefix="inferbus-gpu-bench-"))
    write_demo_models(work / "src")
    cache = work / "trt-cache"
    reference: dict[int, np.ndarray] = {}
    results: list[dict[str, Any]] = []
    for backend, engine_cfg in BACKENDS.items():
        entry: dict[str, Any] = {"backend": backend}
        try:
            model = _version(work, cache, engine_cfg, backend)
            engine = create_engine(model)
            t0 = time.perf_counter()
            engine.load()
            entry["load_s"] = round(time.perf_counter() - t0, 3)
            entry["provider"] = engine.info.provider
            expected = EXPECTED_PROVIDER.get(backend)
            if expected is not None and engine.info.provider != expected:
                raise InferbusError(
                    f"{backend} fell back to {engine.info.provider} (wanted {expected})"
                )
            entry["shapes"] = {}
            for seq in seqs:
                feed = sample_batch(model.config, batch, seq, seed=seq)
                out = engine.infer(feed)["embedding"]
                if backend == "cpu":
                    reference[seq] = out
                row = _throughput(engine, feed, seconds)
                if seq in reference:
                    row["max_abs_diff_vs_cpu"] = float(np.max(np.abs(out - reference[seq])))
                entry["shapes"][f"{batch}x{seq}"] = row
            engine.unload()
            entry["status"] = "ok"
        except (InferbusError, RuntimeError, OSError, ImportError) as exc:
            missing = "not installed" in str(exc) or "none of the configured" in str(exc)
            entry["status"] = "unavailable" if missing else "error"
            entry["error"] = f"{type(exc).__name__}: {exc}"
        results.append(entry)
        print(json.dumps(entry), flush=True)
    shutil.rmtree(work, ignore_errors=True)
    return {"batch": batch, "seconds_per_shape": seconds, "results": results}


def machine() -> dict[str, Any]:
    import onnxruntime as ort

    info: dict[str, Any] = {
        "python": platform.python_version(),
        "onnxruntime": ort.__version__,
        "providers": ort.get_available_providers(),
        "cpu": platform.processor() or platform.machine(),
    }
    try:
        import tensorrt

        info["tensorrt"] = tensorrt.__version__
    except ImportError:
        info["tensorrt"] = None
    if shutil.which("nvidia-smi"):
        query = [
            "nvidia-smi",
            "--query-gpu=name,driver_version,memory.total",
            "--format=csv,noheader",
        ]
        done = subprocess.run(query, capture_output=True, text=True, check=False)
        info["gpu"] = done.stdout.strip() or done.stderr.strip()
    return info


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("gpu_check.json"))
    parser.add_argument("--seconds", type=float, default=3.0, help="Timed seconds per shape.")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seq", type=int, nargs="+", default=[32, 128, 512])
    parser.add_argument("--pytest-rc", type=int, default=None)
    parser.add_argument("--pytest-log", type=Path, default=None)
    args = parser.parse_args()
    report: dict[str, Any] = {"machine": machine()}
    if args.pytest_rc is not None:
        tail = args.pytest_log.read_text()[-4000:] if args.pytest_log else ""
        report["gpu_tests"] = {"rc": args.pytest_rc, "tail": tail}
    report["throughput"] = run(args.seconds, args.seq, args.batch)
    args.out.write_text(json.dumps(report, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

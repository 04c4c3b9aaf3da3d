"""Measure a real engine's batch latency, fit time = a + b·units, write it to `engine.sim`."""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import yaml

from infra.models.config import ModelConfig, ModelConfigError
from infra.models.lookups import model_lookup_rows
from infra.models.repository import ModelRepository
from infra.yaml_unique import safe_load_unique
from schemas.tensors import Arrays
from services.worker.engines.base import Engine
from services.worker.engines.shapes import sample_batch
from services.worker.engines.sim import sequence_input_name, work_units

Per = Literal["token", "sample"]


@dataclass(frozen=True)
class Point:
    """One measured shape: median milliseconds of `repeats` runs after a warm-up run."""

    batch: int
    seq: int | None
    units: int
    ms: float


@dataclass(frozen=True)
class Fit:
    """The fitted latency model and the points it came from."""

    a_ms: float
    b_ms: float
    per: Per
    r2: float
    points: tuple[Point, ...]

    def predict_ms(self, units: int) -> float:
        return self.a_ms + self.b_ms * units


def fit_latency(units: Sequence[float], times_ms: Sequence[float]) -> tuple[float, float, float]:
    """Least squares a, b (both >= 0) for t = a + b·u, weighted by 1/t; returns (a, b, r²).

    Weighting by 1/t fits relative error, so small batches (what the sim mostly serves
    at low load) are not drowned out by the largest shape.
    """
    u = np.asarray(units, dtype=np.float64)
    t = np.asarray(times_ms, dtype=np.float64)
    if len(u) < 2 or len(set(u.tolist())) < 2:
        raise ValueError("need at least two distinct unit counts to fit a and b")
    w = 1.0 / np.maximum(t, 1e-9)
    design = np.stack([np.ones_like(u), u], axis=1) * w[:, None]
    (a, b), *_ = np.linalg.lstsq(design, t * w, rcond=None)
    if a < 0:  # noise at tiny sizes can pull the intercept below zero: refit through the origin
        a, b = 0.0, float(np.sum(w * w * u * t) / np.sum(w * w * u * u))
    b = max(float(b), 0.0)
    predicted = a + b * u
    total = float(np.sum((t - t.mean()) ** 2))
    r2 = 1.0 - float(np.sum((t - predicted) ** 2)) / total if total > 0 else 1.0
    return float(a), b, r2


def default_grid(config: ModelConfig) -> tuple[Per, list[tuple[int, int | None]]]:
    """Shapes to measure: batch sizes 1..max, and each length bucket for sequence models."""
    top = config.batching.max_batch_size
    sizes = sorted({1, max(1, top // 4), max(1, top // 2), top})
    if sequence_input_name(config) is None:
        return "sample", [(size, None) for size in sizes]
    lengths = config.batching.length_buckets or [32, 128]
    return "token", [(size, seq) for seq in lengths for size in sizes]


def measure(
    engine: Engine,
    config: ModelConfig,
    shapes: Sequence[tuple[int, int | None]],
    *,
    repeats: int = 5,
    clock: Callable[[], float] = time.perf_counter,
    on_point: Callable[[Point], None] | None = None,
    index_limits: Mapping[str, int] | None = None,
) -> list[Point]:
    """Median time of each shape after one unmeasured run; the engine must be loaded.

    `index_limits`: rows of the tables the model indexes, that sample ids stay below."""
    points: list[Point] = []
    for batch, seq in shapes:
        feed = sample_batch(config, batch, seq, index_limits=index_limits)
        engine.infer(feed)
        samples = []
        for _ in range(repeats):
            started = clock()
            engine.infer(feed)
            samples.append((clock() - started) * 1000)
        point = Point(batch, seq, work_units_for(config, feed), statistics.median(samples))
        points.append(point)
        if on_point is not None:
            on_point(point)
    return points


def work_units_for(config: ModelConfig, feed: Arrays) -> int:
    """Units as the sim will charge them under the per-mode this calibration picks."""
    per: Per = "token" if sequence_input_name(config) is not None else "sample"
    sim = config.engine.sim.model_copy(update={"per": per})
    engine = config.engine.model_copy(update={"sim": sim})
    return work_units(config.model_copy(update={"engine": engine}), feed)


def calibrate_engine(
    engine: Engine,
    config: ModelConfig,
    *,
    shapes: Sequence[tuple[int, int | None]] | None = None,
    repeats: int = 5,
    clock: Callable[[], float] = time.perf_counter,
    on_point: Callable[[Point], None] | None = None,
    index_limits: Mapping[str, int] | None = None,
) -> Fit:
    """Measure a loaded engine over `shapes` (default: `default_grid`) and fit a and b."""
    per, grid = default_grid(config)
    points = measure(
        engine,
        config,
        shapes or grid,
        repeats=repeats,
        clock=clock,
        on_point=on_point,
        index_limits=index_limits,
    )
    a, b, r2 = fit_latency([p.units for p in points], [p.ms for p in points])
    return Fit(a_ms=a, b_ms=b, per=per, r2=r2, points=tuple(points))


def write_sim(path: Path, fit: Fit) -> None:
    """Set `engine.sim` in a model.yaml, keep every other key as written, and revalidate."""
    raw = safe_load_unique(path.read_text())
    if not isinstance(raw, dict):
        raise ModelConfigError(f"{path} must hold a mapping", path=str(path))
    engine = raw.setdefault("engine", {})
    kept = engine.get("sim") if isinstance(engine.get("sim"), dict) else {}
    # The fit's three fields over what was there: `error_rate` (a simulated bad version)
    # and any other sim setting stay as written.
    engine["sim"] = {
        **kept,
        "a_ms": round(fit.a_ms, 4),
        "b_ms": round(fit.b_ms, 6),
        "per": fit.per,
    }
    fd, tmp = tempfile.mkstemp(prefix=".model.yaml.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            yaml.safe_dump(raw, handle, sort_keys=False)
        ModelConfig.load(Path(tmp))  # same folder, so the name check still holds
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def calibrate_model(
    root: Path,
    name: str,
    *,
    repeats: int = 5,
    shapes: Sequence[tuple[int, int | None]] | None = None,
    on_point: Callable[[Point], None] | None = None,
    write: bool = True,
) -> Fit:
    """Calibrate the model's real engine (ONNX Runtime if its config says `sim`), save the fit."""
    from services.worker.engines.factory import create_engine

    model = ModelRepository(root).resolve(name)
    if model.config.engine.kind == "sim":
        real = model.config.engine.model_copy(update={"kind": "onnxruntime"})
        model = type(model)(
            model.name,
            model.version,
            model.directory,
            model.config.model_copy(update={"engine": real}),
        )
    engine = create_engine(model)
    engine.load()
    try:
        fit = calibrate_engine(
            engine,
            model.config,
            shapes=shapes,
            repeats=repeats,
            on_point=on_point,
            index_limits=model_lookup_rows(model.model_file),
        )
    finally:
        engine.unload()
    if write:
        write_sim(Path(root) / name / "model.yaml", fit)
    return fit

"""Calibration: the fit recovers a sim engine's a and b, and only engine.sim changes on disk."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from infra.models.config import ModelConfig
from infra.models.repository import ModelRepository, ModelVersion
from services.models.calibrate import Fit, Point, calibrate_engine, fit_latency, write_sim
from services.models.demo import ENCODER, MLP
from services.worker.engines.sim import SimEngine


class FakeClock:
    """Time that moves only when the engine sleeps."""

    def __init__(self) -> None:
        self.now_s = 100.0

    def now(self) -> float:
        return self.now_s

    def sleep(self, seconds: float) -> None:
        self.now_s += seconds


def _sim_version(model: ModelVersion, a_ms: float, b_ms: float, per: str) -> ModelVersion:
    sim = model.config.engine.sim.model_copy(update={"a_ms": a_ms, "b_ms": b_ms, "per": per})
    engine = model.config.engine.model_copy(update={"kind": "sim", "sim": sim})
    config = model.config.model_copy(update={"engine": engine})
    return ModelVersion(model.name, model.version, model.directory, config)


@pytest.mark.parametrize(
    ("name", "per", "a_ms", "b_ms"),
    [(ENCODER, "token", 3.0, 0.04), (MLP, "sample", 0.2, 0.01)],
    ids=["encoder-per-token", "mlp-per-sample"],
)
def test_fit_recovers_sim_parameters(
    demo_models: Path, name: str, per: str, a_ms: float, b_ms: float
) -> None:
    model = _sim_version(ModelRepository(demo_models).resolve(name), a_ms, b_ms, per)
    clock = FakeClock()
    engine = SimEngine(model, sleep=clock.sleep, clock=clock.now)
    engine.load()
    seen: list[Point] = []
    fit = calibrate_engine(engine, model.config, repeats=2, clock=clock.now, on_point=seen.append)
    assert fit.per == per
    assert fit.a_ms == pytest.approx(a_ms, rel=1e-6)
    assert fit.b_ms == pytest.approx(b_ms, rel=1e-6)
    assert fit.r2 == pytest.approx(1.0)
    assert len(seen) == len(fit.points) > 2


def test_fit_with_real_sleeps_is_close(demo_models: Path) -> None:
    model = _sim_version(ModelRepository(demo_models).resolve(MLP), 4.0, 0.5, "sample")
    engine = SimEngine(model)
    engine.load()
    fit = calibrate_engine(
        engine, model.config, shapes=[(1, None), (8, None), (32, None)], repeats=3
    )
    assert fit.a_ms == pytest.approx(4.0, abs=1.5)
    assert fit.b_ms == pytest.approx(0.5, rel=0.2)


@pytest.mark.parametrize(
    ("units", "times", "a", "b"),
    [
        ([1, 2, 4], [3.0, 5.0, 9.0], 1.0, 2.0),
        ([10, 20], [1.0, 2.2], 0.0, None),  # negative intercept: refit through the origin
    ],
    ids=["exact", "clamped-intercept"],
)
def test_fit_latency(units: list[int], times: list[float], a: float, b: float | None) -> None:
    got_a, got_b, _ = fit_latency(units, times)
    assert got_a == pytest.approx(a, abs=1e-9)
    assert got_b > 0
    if b is not None:
        assert got_b == pytest.approx(b)


def test_fit_needs_two_sizes() -> None:
    with pytest.raises(ValueError, match="two distinct"):
        fit_latency([4, 4], [1.0, 1.1])


def test_write_sim_keeps_everything_else(demo_models: Path, tmp_path: Path) -> None:
    shutil.copytree(demo_models / ENCODER, tmp_path / ENCODER)
    path = tmp_path / ENCODER / "model.yaml"
    before = yaml.safe_load(path.read_text())
    write_sim(path, Fit(a_ms=1.23456, b_ms=0.0456789, per="token", r2=0.99, points=()))
    after = yaml.safe_load(path.read_text())
    fitted = {"a_ms": 1.2346, "b_ms": 0.045679, "per": "token"}
    assert after["engine"].pop("sim") == {**before["engine"].pop("sim"), **fitted}
    assert after == before
    assert ModelConfig.load(path).engine.sim.b_ms == 0.045679
    assert not list(path.parent.glob("*.tmp"))


def test_write_sim_keeps_the_other_sim_settings(demo_models: Path, tmp_path: Path) -> None:
    """`error_rate` (a simulated bad version) was dropped with the old a and b."""
    shutil.copytree(demo_models / ENCODER, tmp_path / ENCODER)
    path = tmp_path / ENCODER / "model.yaml"
    raw = yaml.safe_load(path.read_text())
    raw["engine"]["sim"] = {"a_ms": 9.0, "b_ms": 9.0, "per": "sample", "error_rate": 0.25}
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    write_sim(path, Fit(a_ms=1.0, b_ms=0.5, per="token", r2=0.99, points=()))
    sim = ModelConfig.load(path).engine.sim
    assert (sim.a_ms, sim.b_ms, sim.per, sim.error_rate) == (1.0, 0.5, "token", 0.25)

"""Sim engine: the latency model, declared shapes and dtypes, deterministic outputs, the label."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from infra.models.repository import ModelVersion
from services.models.demo import ENCODER, MLP
from services.worker.engines import create_engine
from services.worker.engines.shapes import sample_batch
from services.worker.engines.sim import SimEngine, latency_ms, work_units


class Sleeps:
    """Records requested sleeps instead of sleeping."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


@pytest.mark.parametrize(
    ("name", "per", "batch", "seq", "units"),
    [
        (MLP, "sample", 8, None, 8),
        (ENCODER, "token", 4, 64, 256),
        (ENCODER, "sample", 4, 64, 4),
    ],
    ids=["mlp-per-sample", "encoder-per-token", "encoder-per-sample"],
)
def test_sleeps_a_plus_b_units(
    edited_model: Callable[..., ModelVersion],
    name: str,
    per: str,
    batch: int,
    seq: int | None,
    units: int,
) -> None:
    model = edited_model(name, {"kind": "sim", "sim": {"a_ms": 2.0, "b_ms": 0.5, "per": per}})
    sleeps = Sleeps()
    engine = SimEngine(model, sleep=sleeps)
    engine.load()
    feed = sample_batch(model.config, batch, seq)
    assert work_units(model.config, feed) == units
    engine.infer(feed)
    assert len(sleeps.calls) == 1
    assert sleeps.calls[0] == pytest.approx((2.0 + 0.5 * units) / 1000, abs=1e-3)
    assert latency_ms(model.config.engine.sim, units) == 2.0 + 0.5 * units


def test_outputs_have_declared_shapes_dtypes_and_label(
    edited_model: Callable[..., ModelVersion],
) -> None:
    model = edited_model(ENCODER, {"kind": "sim", "sim": {"a_ms": 0, "b_ms": 0}})
    engine = create_engine(model)
    assert isinstance(engine, SimEngine)
    engine.load()
    out = engine.infer(sample_batch(model.config, 3, 32))
    assert out["embedding"].shape == (3, 256)
    assert out["embedding"].dtype == np.float32
    assert engine.info.simulated
    assert engine.info.provider == "sim"
    assert engine.info.label == "sim:sim (simulated)"


def test_outputs_are_per_sample_and_padding_invariant(
    edited_model: Callable[..., ModelVersion],
) -> None:
    model = edited_model(ENCODER, {"kind": "sim", "sim": {"a_ms": 0, "b_ms": 0}})
    engine = SimEngine(model)
    engine.load()
    batch = sample_batch(model.config, 4, 32, seed=1)
    whole = engine.infer(batch)["embedding"]
    alone = engine.infer({k: v[2:3] for k, v in batch.items()})["embedding"]
    np.testing.assert_array_equal(whole[2:3], alone)
    padded = {k: np.pad(v, ((0, 0), (0, 32))) for k, v in batch.items()}
    np.testing.assert_array_equal(engine.infer(padded)["embedding"], whole)
    assert not np.array_equal(whole[0], whole[1])


def test_sim_needs_no_model_file(edited_model: Callable[..., ModelVersion]) -> None:
    model = edited_model(MLP, {"kind": "sim"})
    model.model_file.unlink()
    engine = create_engine(model)
    engine.load()
    assert engine.infer(sample_batch(model.config, 2))["y"].shape == (2, 4)

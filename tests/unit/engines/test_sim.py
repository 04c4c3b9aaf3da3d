"""Sim engine: the latency model, declared shapes and dtypes, deterministic outputs, the label."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from infra.models.repository import ModelVersion
from schemas.errors import EngineError
from services.models.demo import ENCODER, MLP
from services.worker.engines import create_engine
from services.worker.engines.shapes import sample_batch
from services.worker.engines.sim import SimEngine, failing_samples, latency_ms, work_units


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
    # A clock that stands still: the sleep is the whole latency, however busy the host.
    engine = SimEngine(model, sleep=sleeps, clock=lambda: 0.0)
    engine.load()
    feed = sample_batch(model.config, batch, seq)
    assert work_units(model.config, feed) == units
    engine.infer(feed)
    assert len(sleeps.calls) == 1
    assert sleeps.calls[0] == pytest.approx((2.0 + 0.5 * units) / 1000)
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


def test_a_version_folder_brings_its_own_latency_model(
    edited_model: Callable[..., ModelVersion],
) -> None:
    model = edited_model(MLP, {"kind": "sim", "sim": {"a_ms": 1.0, "b_ms": 0.0}})
    (model.directory / "sim.yaml").write_text("a_ms: 40\nb_ms: 0\n")
    sleeps = Sleeps()
    engine = SimEngine(model, sleep=sleeps)
    engine.load()
    engine.infer(sample_batch(model.config, 2))
    assert sleeps.calls[0] == pytest.approx(0.040, abs=1e-3)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("a_ms: [", "not a valid sim config", id="bad-yaml"),
        pytest.param("a_ms: -3\n", "a_ms", id="negative"),
        pytest.param("error_rate: 2\n", "error_rate", id="rate-over-1"),
        pytest.param("surprise: 1\n", "surprise", id="unknown-field"),
    ],
)
def test_a_bad_version_sim_file_fails_the_load_naming_it(
    edited_model: Callable[..., ModelVersion], text: str, message: str
) -> None:
    model = edited_model(MLP, {"kind": "sim"})
    (model.directory / "sim.yaml").write_text(text)
    with pytest.raises(EngineError, match=r"sim\.yaml") as caught:
        SimEngine(model).load()
    assert message in str(caught.value)


def test_failing_samples_are_a_fixed_share_of_inputs() -> None:
    seeds = np.random.default_rng(1).standard_normal(20_000) * 10
    failing = failing_samples(seeds, 0.3)
    assert abs(failing.mean() - 0.3) < 0.02
    assert np.array_equal(failing, failing_samples(seeds, 0.3)), "the same samples every time"
    assert not failing_samples(seeds, 0.0).any()
    assert failing_samples(np.zeros(3), 1.0).all()
    assert not failing_samples(np.zeros(3), 0.99).any()


def test_an_error_rate_fails_batches_but_not_the_warm_up(
    edited_model: Callable[..., ModelVersion],
) -> None:
    model = edited_model(MLP, {"kind": "sim", "sim": {"a_ms": 0, "b_ms": 0}})
    (model.directory / "sim.yaml").write_text("a_ms: 0\nb_ms: 0\nerror_rate: 0.5\n")
    engine = SimEngine(model)
    engine.load()
    batch = sample_batch(model.config, 32)
    engine.warmup([batch])
    with pytest.raises(EngineError, match="simulated failure"):
        engine.infer(batch)


def test_an_error_rate_of_one_fails_the_warm_up(
    edited_model: Callable[..., ModelVersion],
) -> None:
    model = edited_model(MLP, {"kind": "sim", "sim": {"a_ms": 0, "b_ms": 0}})
    (model.directory / "sim.yaml").write_text("error_rate: 1\n")
    engine = SimEngine(model)
    engine.load()
    with pytest.raises(EngineError, match="simulated failure"):
        engine.warmup([sample_batch(model.config, 1)])

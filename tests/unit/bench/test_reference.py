"""The raw reference a ratio divides by is ONNX Runtime as a user runs it without us."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra.models.repository import ModelRepository
from services.bench.throughput import all_cores, ratio_over_raw
from services.models.demo import write_demo_models


def test_the_reference_uses_every_core_with_onnx_runtimes_default_spinning(
    tmp_path: Path,
) -> None:
    write_demo_models(tmp_path)
    served = ModelRepository(tmp_path).resolve("demo-encoder")
    assert not served.config.engine.intra_op_spinning  # served engines share the cores

    reference = all_cores(served)

    assert reference.config.engine.intra_op_num_threads == 0
    assert reference.config.engine.intra_op_spinning, "ONNX Runtime's default: threads spin"
    assert served.config.engine.intra_op_spinning is False, "the served model is untouched"


@pytest.mark.parametrize(
    ("engine", "raw_kind", "ratio"),
    [
        ("model", "onnxruntime", 0.75),
        ("null", "sim", None),
        ("sim", "sim", None),
        pytest.param("model", "sim", None, id="model-yaml-names-the-sim-engine"),
    ],
)
def test_only_the_models_own_engine_gets_a_ratio(
    engine: str, raw_kind: str, ratio: float | None
) -> None:
    """A `null` or `sim` run's raw reading is one simulated engine, not ONNX Runtime on all
    cores: a ratio over it would divide by less than a user gets without us. So is the raw
    reading of a model whose own model.yaml names the simulated engine."""
    assert ratio_over_raw(engine, 300.0, 400.0, raw_kind=raw_kind) == ratio

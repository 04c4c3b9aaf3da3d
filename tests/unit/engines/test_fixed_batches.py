"""A graph whose batch is fixed (`[1, 16]`): found from its input shapes, run that many
samples at a time (onnxruntime and native TensorRT share this), its profile pinned."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from schemas.errors import EngineError
from schemas.tensors import Arrays
from services.worker.engines.inputs import fixed_batch, in_fixed_batches
from services.worker.engines.shapes import Profile, with_batch


@pytest.mark.parametrize(
    ("shapes", "batch"),
    [
        pytest.param({"x": [1, 16]}, 1, id="fixed-1"),
        pytest.param({"ids": (4, -1), "mask": (4, -1)}, 4, id="fixed-4-dynamic-sequence"),
        pytest.param({"x": [-1, 16]}, None, id="tensorrt-dynamic"),
        pytest.param({"x": ["batch", 16]}, None, id="onnx-named-axis"),
        pytest.param({"x": [None, 16]}, None, id="onnx-unnamed-axis"),
        pytest.param({"x": [1, 16], "y": [-1, 4]}, 1, id="one-fixed-one-dynamic"),
        pytest.param({"x": []}, None, id="a-scalar-input"),
    ],
)
def test_fixed_batch_is_read_from_the_input_shapes(
    shapes: dict[str, Any], batch: int | None
) -> None:
    assert fixed_batch(shapes) == batch


def test_inputs_that_fix_different_batches_are_refused() -> None:
    with pytest.raises(EngineError, match="different batch sizes"):
        fixed_batch({"x": [1, 16], "y": [2, 16]})


class Graph:
    """A graph fixed to `size` samples: doubles x, and says how many rows each call got."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.calls: list[int] = []

    def __call__(self, feed: Arrays) -> Arrays:
        rows = len(feed["x"])
        assert rows == self.size, "a fixed-batch graph takes no other batch"
        self.calls.append(rows)
        return {"y": feed["x"] * 2, "n": np.full((rows, 1), rows)}


@pytest.mark.parametrize(
    ("samples", "size", "calls"),
    [
        pytest.param(1, 1, 1, id="one-at-one"),
        pytest.param(5, 1, 5, id="five-at-one"),
        pytest.param(4, 4, 1, id="exactly-one-batch"),
        pytest.param(6, 4, 2, id="a-short-last-chunk-padded"),
        pytest.param(3, 4, 1, id="fewer-than-one-batch-padded"),
    ],
)
def test_a_batch_is_run_size_samples_at_a_time(samples: int, size: int, calls: int) -> None:
    graph = Graph(size)
    x = np.arange(samples * 2, dtype=np.float32).reshape(samples, 2)
    out = in_fixed_batches({"x": x}, size, graph, ["y", "n"])
    assert len(graph.calls) == calls
    np.testing.assert_array_equal(out["y"], x * 2, err_msg="each sample's rows, in order")
    assert out["n"].shape == (samples, 1), "the padding rows are dropped again"


def test_with_batch_pins_the_batch_axis_of_every_shape() -> None:
    shapes = {"ids": Profile((1, 1), (32, 32), (32, 512))}
    assert with_batch(shapes, 4) == {"ids": Profile((4, 1), (4, 32), (4, 512))}

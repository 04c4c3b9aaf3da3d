"""Graphs as they come from exporters in the wild, each served by the ONNX Runtime engine
batched as the worker batches them, compared with a plain session run one sample at a time;
or refused at load or warm-up, naming the tensor and what to change."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from infra.models.config import ModelConfig
from infra.models.repository import ModelVersion
from schemas.errors import EngineError
from services.worker.engines.onnx_runtime import OnnxRuntimeEngine
from services.worker.engines.shapes import sample_batch, warmup_batches
from services.worker.execution import run_batch

W = np.arange(64, dtype=np.float32).reshape(16, 4) / 64


def _value(name: str, dtype: int, shape: list[Any] | None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, shape)


@dataclass(frozen=True)
class Case:
    """A graph, the model.yaml inputs/outputs a user would write for it, and the outcome."""

    nodes: list[onnx.NodeProto]
    inputs: list[onnx.ValueInfoProto]
    outputs: list[onnx.ValueInfoProto]
    declared: dict[str, list[tuple[str, str, list[int]]]]
    initializers: list[onnx.TensorProto] = field(default_factory=list)
    refused: str | None = None
    """A pattern of the EngineError load or warm-up must raise; None: served."""


def _spec(name: str, dtype: str, shape: list[int]) -> dict[str, Any]:
    return {"name": name, "dtype": dtype, "shape": shape}


def _matmul(batch: Any, extra: list[onnx.ValueInfoProto] | None = None) -> Case:
    return Case(
        [helper.make_node("MatMul", ["x", "W"], ["y"])],
        [_value("x", T.FLOAT, [batch, 16])],
        [_value("y", T.FLOAT, [batch, 4]), *(extra or [])],
        {"inputs": [("x", "float32", [-1, 16])], "outputs": [("y", "float32", [-1, 4])]},
        [numpy_helper.from_array(W, "W")],
    )


CONSTANT = helper.make_node(
    "Constant", [], ["c"], value=numpy_helper.from_array(np.ones(3, np.float32))
)
CASES = {
    "fixed-batch-1": _matmul(1),
    "fixed-batch-4": _matmul(4),
    "constant-output-left-out": Case(
        [helper.make_node("MatMul", ["x", "W"], ["y"]), CONSTANT],
        [_value("x", T.FLOAT, ["N", 16])],
        [_value("y", T.FLOAT, ["N", 4]), _value("c", T.FLOAT, [3])],
        {"inputs": [("x", "float32", [-1, 16])], "outputs": [("y", "float32", [-1, 4])]},
        [numpy_helper.from_array(W, "W")],
    ),
    "constant-output-declared": Case(
        [helper.make_node("MatMul", ["x", "W"], ["y"]), CONSTANT],
        [_value("x", T.FLOAT, ["N", 16])],
        [_value("y", T.FLOAT, ["N", 4]), _value("c", T.FLOAT, [3])],
        {
            "inputs": [("x", "float32", [-1, 16])],
            "outputs": [("y", "float32", [-1, 4]), ("c", "float32", [-1])],
        },
        [numpy_helper.from_array(W, "W")],
        refused=r"output 'c' came back as \[3\] for a batch of 1.*batch as its first axis",
    ),
    "scalar-output-declared": Case(
        [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0)],
        [_value("x", T.FLOAT, ["N", 16])],
        [_value("s", T.FLOAT, [])],
        {"inputs": [("x", "float32", [-1, 16])], "outputs": [("s", "float32", [-1])]},
        refused=r"output 's' came back as \[\]",
    ),
    "one-row-constant-declared": Case(  # [1] fits a batch of 1: only a second size tells
        [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=1)],
        [_value("x", T.FLOAT, ["N", 16])],
        [_value("s", T.FLOAT, [1, 1])],
        {"inputs": [("x", "float32", [-1, 16])], "outputs": [("s", "float32", [-1, 1])]},
        refused=r"output 's' came back as \[1, 1\] for a batch of 2",
    ),
    "transposed-output": Case(
        [helper.make_node("Transpose", ["x"], ["y"], perm=[1, 0])],
        [_value("x", T.FLOAT, ["N", 16])],
        [_value("y", T.FLOAT, [16, "N"])],
        {"inputs": [("x", "float32", [-1, 16])], "outputs": [("y", "float32", [-1, -1])]},
        refused=r"output 'y' came back as \[16, 1\]",
    ),
    "fixed-axis-declared-dynamic": Case(
        [helper.make_node("MatMul", ["x", "W"], ["y"])],
        [_value("x", T.FLOAT, ["N", 16])],
        [_value("y", T.FLOAT, ["N", 4])],
        {"inputs": [("x", "float32", [-1, -1])], "outputs": [("y", "float32", [-1, 4])]},
        [numpy_helper.from_array(W, "W")],
        refused=r"input 'x' axis 1: model.yaml says -1, the graph fixes 16 \(write 16\)",
    ),
    "output-dtypes": Case(
        [
            helper.make_node("ArgMax", ["x"], ["cls"], axis=1, keepdims=0),
            helper.make_node("Greater", ["x", "zero"], ["flag"]),
            helper.make_node("Cast", ["x"], ["half"], to=T.FLOAT16),
        ],
        [_value("x", T.FLOAT, ["N", 4])],
        [
            _value("cls", T.INT64, ["N"]),
            _value("flag", T.BOOL, ["N", 4]),
            _value("half", T.FLOAT16, ["N", 4]),
        ],
        {
            "inputs": [("x", "float32", [-1, 4])],
            "outputs": [
                ("cls", "int64", [-1]),
                ("flag", "bool", [-1, 4]),
                ("half", "float16", [-1, 4]),
            ],
        },
        [numpy_helper.from_array(np.array(0, np.float32), "zero")],
    ),
    "input-dtypes": Case(
        [helper.make_node("Cast", [n], [f"{n}_f"], to=T.FLOAT) for n in "abcd"]
        + [helper.make_node("Sum", [f"{n}_f" for n in "abcd"], ["out"])],
        [
            _value("a", T.FLOAT16, ["N", 4]),
            _value("b", T.INT32, ["N", 4]),
            _value("c", T.UINT8, ["N", 4]),
            _value("d", T.BOOL, ["N", 4]),
        ],
        [_value("out", T.FLOAT, ["N", 4])],
        {
            "inputs": [
                ("a", "float16", [-1, 4]),
                ("b", "int32", [-1, 4]),
                ("c", "uint8", [-1, 4]),
                ("d", "bool", [-1, 4]),
            ],
            "outputs": [("out", "float32", [-1, 4])],
        },
    ),
    "image-and-3d": Case(
        [
            helper.make_node("ReduceMean", ["img"], ["pix"], axes=[2, 3], keepdims=0),
            helper.make_node("ReduceSum", ["seq", "one"], ["tot"], keepdims=0),
        ],
        [_value("img", T.FLOAT, ["N", 3, 32, 32]), _value("seq", T.FLOAT, ["N", 5, 7])],
        [_value("pix", T.FLOAT, ["N", 3]), _value("tot", T.FLOAT, ["N", 7])],
        {
            "inputs": [("img", "float32", [-1, 3, 32, 32]), ("seq", "float32", [-1, 5, 7])],
            "outputs": [("pix", "float32", [-1, 3]), ("tot", "float32", [-1, 7])],
        },
        [numpy_helper.from_array(np.array([1], np.int64), "one")],
    ),
    "exporter-names": Case(
        [
            helper.make_node("Add", ["input_1:0", "onnx::Gemm_0"], ["t"]),
            helper.make_node("Mul", ["t", "a/b.c d"], ["out/put:0"]),
        ],
        [_value(n, T.FLOAT, ["N", 4]) for n in ("input_1:0", "onnx::Gemm_0", "a/b.c d")],
        [_value("out/put:0", T.FLOAT, ["N", 4])],
        {
            "inputs": [(n, "float32", [-1, 4]) for n in ("input_1:0", "onnx::Gemm_0", "a/b.c d")],
            "outputs": [("out/put:0", "float32", [-1, 4])],
        },
    ),
    "initializer-input": Case(
        [helper.make_node("Add", ["x", "bias"], ["y"])],
        [_value("x", T.FLOAT, ["N", 4]), _value("bias", T.FLOAT, [4])],
        [_value("y", T.FLOAT, ["N", 4])],
        {"inputs": [("x", "float32", [-1, 4])], "outputs": [("y", "float32", [-1, 4])]},
        [numpy_helper.from_array(np.arange(4, dtype=np.float32), "bias")],
    ),
}


def write_version(root: Path, name: str, case: Case, *, external: bool = False) -> ModelVersion:
    """`<root>/<name>/1/model.onnx` of the case's graph, and its model.yaml."""
    graph = helper.make_graph(case.nodes, name, case.inputs, case.outputs, case.initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    folder = root / name / "1"
    folder.mkdir(parents=True)
    onnx.save_model(
        model,
        str(folder / "model.onnx"),
        save_as_external_data=external,
        location="weights.bin",
        size_threshold=0,
    )
    config = ModelConfig.model_validate(
        {
            "name": name,
            "inputs": [_spec(*spec) for spec in case.declared["inputs"]],
            "outputs": [_spec(*spec) for spec in case.declared["outputs"]],
            "batching": {"max_batch_size": 8},
            "engine": {"providers": ["cpu"]},
        }
    )
    config.dump(root / name / "model.yaml")
    return ModelVersion(name, "1", folder, config)


def alone_answer(version: ModelVersion, request: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A plain session's answer for one sample (a fixed batch filled with copies of it)."""
    session = ort.InferenceSession(str(version.model_file), providers=["CPUExecutionProvider"])
    batch = session.get_inputs()[0].shape[0]
    copies = batch if isinstance(batch, int) else 1
    feed = {name: np.repeat(array, copies, axis=0) for name, array in request.items()}
    names = [spec.name for spec in version.config.outputs]
    return {name: value[:1] for name, value in zip(names, session.run(names, feed), strict=True)}


def _served(version: ModelVersion) -> OnnxRuntimeEngine:
    engine = OnnxRuntimeEngine(version)
    engine.load()
    engine.warmup(warmup_batches(version.config))
    return engine


@pytest.mark.parametrize("name", [n for n, c in CASES.items() if c.refused is None])
@pytest.mark.parametrize("requests", [1, 5, 8])
def test_served_batched_equals_each_sample_alone(tmp_path: Path, name: str, requests: int) -> None:
    """Regression: a fixed batch of 1 failed every batch of 2+ (each retried down to single
    requests), a fixed batch of 4 failed warm-up (the worker restarted for ever), and an
    output model.yaml left out (a constant) failed every request as `internal_error`."""
    version = write_version(tmp_path, name, CASES[name])
    engine = _served(version)
    batch = [sample_batch(version.config, 1, seed=seed) for seed in range(requests)]
    outcomes = run_batch(engine.infer, batch, [1] * requests, version.config, None)
    for request, outcome in zip(batch, outcomes, strict=True):
        assert outcome.error is None
        assert outcome.batch_size == requests  # ran as one batch, no retry
        alone = alone_answer(version, request)
        assert outcome.outputs is not None and set(outcome.outputs) == set(alone)
        for output, value in alone.items():
            assert outcome.outputs[output].dtype == value.dtype
            np.testing.assert_allclose(outcome.outputs[output], value, rtol=1e-6)


@pytest.mark.parametrize("name", [n for n, c in CASES.items() if c.refused is not None])
def test_refused_at_load_naming_the_tensor(tmp_path: Path, name: str) -> None:
    """Regression: each loaded and warmed; then every request failed as `internal_error`,
    and a transposed [16, N] output was answered wrong rows at a batch of 16."""
    case = CASES[name]
    version = write_version(tmp_path, name, case)
    assert case.refused is not None
    with pytest.raises(EngineError, match=case.refused):
        _served(version)


def test_external_weights_are_served(tmp_path: Path) -> None:
    version = write_version(tmp_path, "ext", _matmul("N"), external=True)
    assert (version.directory / "weights.bin").stat().st_size == W.nbytes
    engine = _served(version)
    request = sample_batch(version.config, 3)
    np.testing.assert_allclose(engine.infer(request)["y"], request["x"] @ W, rtol=1e-6)


def test_graph_inputs_that_fix_different_batches_are_refused(tmp_path: Path) -> None:
    case = Case(
        [helper.make_node("Add", ["a", "b"], ["y"])],
        [_value("a", T.FLOAT, [1, 4]), _value("b", T.FLOAT, [4, 4])],
        [_value("y", T.FLOAT, [4, 4])],
        {
            "inputs": [("a", "float32", [-1, 4]), ("b", "float32", [-1, 4])],
            "outputs": [("y", "float32", [-1, 4])],
        },
    )
    with pytest.raises(EngineError, match=r"graph inputs fix different batch sizes"):
        _served(write_version(tmp_path, "two-batches", case))

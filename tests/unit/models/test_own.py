"""`inferbus models add onnx`: model.yaml read off your own graph, the version checked in
the worker's engine, and what cannot be served refused before a worker sees it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper
from typer.testing import CliRunner

from infra.models.repository import ModelRepository
from schemas.errors import ModelNotFound
from services.models import own
from services.models.cli import models_app
from services.models.own import OwnModelRefused, add_onnx
from services.worker.engines.onnx_runtime import OnnxRuntimeEngine

W = np.arange(64, dtype=np.float32).reshape(16, 4) / 64


def _graph(
    nodes: list[onnx.NodeProto],
    inputs: list[tuple[str, int, list[Any]]],
    outputs: list[tuple[str, int, list[Any] | None]],
    initializers: list[onnx.TensorProto] | None = None,
    opset: int = 17,
    domains: tuple[str, ...] = (),
) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(*spec) for spec in inputs],
        [helper.make_tensor_value_info(*spec) for spec in outputs],
        initializers or [],
    )
    opsets = [helper.make_opsetid("", opset), *(helper.make_opsetid(d, 1) for d in domains)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    return model


def _matmul(batch: Any) -> onnx.ModelProto:
    return _graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])],
        [("x", T.FLOAT, [batch, 16])],
        [("y", T.FLOAT, [batch, 4])],
        [numpy_helper.from_array(W, "W")],
    )


CONSTANT = helper.make_node(
    "Constant", [], ["c"], value=numpy_helper.from_array(np.ones(3, np.float32))
)
SERVED = {
    "fixed-batch-1": (
        _matmul(1),
        {"x": ("float32", [-1, 16])},
        {"y": ("float32", [-1, 4])},
        r"fixes the batch at 1",
    ),
    "constant-and-scalar-outputs": (
        _graph(
            [
                helper.make_node("MatMul", ["x", "W"], ["y"]),
                CONSTANT,
                helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
            ],
            [("x", T.FLOAT, ["N", 16])],
            [("y", T.FLOAT, ["N", 4]), ("c", T.FLOAT, [3]), ("s", T.FLOAT, None)],
            [numpy_helper.from_array(W, "W")],
        ),
        {"x": ("float32", [-1, 16])},
        {"y": ("float32", [-1, 4])},
        r"left out: output 'c' has no batch axis.*left out: output 's'",
    ),
    "initializer-input": (
        _graph(
            [helper.make_node("Add", ["x", "bias"], ["y"])],
            [("x", T.FLOAT16, ["batch", 4]), ("bias", T.FLOAT16, [4])],
            [("y", T.FLOAT16, ["batch", 4])],
            [numpy_helper.from_array(np.ones(4, np.float16), "bias")],
        ),
        {"x": ("float16", [-1, 4])},
        {"y": ("float16", [-1, 4])},
        r"input 'bias' has a default in the graph",
    ),
    "exporter-names-and-dtypes": (
        _graph(
            [
                helper.make_node("Cast", ["input_1:0"], ["onnx::Cast_1"], to=T.FLOAT),
                helper.make_node("ArgMax", ["onnx::Cast_1"], ["class/ids:0"], axis=1, keepdims=0),
            ],
            [("input_1:0", T.UINT8, ["N", 3, 8, 8])],
            [("class/ids:0", T.INT64, ["N", 8, 8])],
        ),
        {"input_1:0": ("uint8", [-1, 3, 8, 8])},
        {"class/ids:0": ("int64", [-1, 8, 8])},
        None,
    ),
}


@pytest.mark.parametrize("name", list(SERVED))
def test_adds_what_can_be_served(tmp_path: Path, name: str) -> None:
    model, inputs, outputs, note = SERVED[name]
    onnx.save(model, str(tmp_path / "source.onnx"))
    added = add_onnx(tmp_path / "repo", tmp_path / "source.onnx", name)
    version = ModelRepository(tmp_path / "repo").resolve(name)
    assert version.version == "1" and (version.directory / "READY").exists()
    assert {s.name: (s.dtype, s.shape) for s in version.config.inputs} == inputs
    assert {s.name: (s.dtype, s.shape) for s in version.config.outputs} == outputs
    if note is None:
        assert added.notes == []
    else:
        assert re.search(note, " ".join(added.notes))
    engine = OnnxRuntimeEngine(version)
    engine.load()
    engine.warmup([])


@pytest.mark.parametrize(
    ("source", "refused"),
    [
        pytest.param(b"", r"is empty", id="empty"),
        pytest.param(
            _matmul("N").SerializeToString()[:40], r"is not an ONNX model", id="truncated"
        ),
        pytest.param(
            _graph(
                [helper.make_node("FancyRelu", ["x"], ["y"], domain="com.example")],
                [("x", T.FLOAT, ["N", 4])],
                [("y", T.FLOAT, ["N", 4])],
                domains=("com.example",),
            ).SerializeToString(),
            r"cannot load .*FancyRelu",
            id="custom-op",
        ),
        pytest.param(
            _graph(
                [helper.make_node("Relu", ["x"], ["y"])],
                [("x", T.FLOAT, ["N", 4])],
                [("y", T.FLOAT, ["N", 4])],
                opset=99,
            ).SerializeToString(),
            r"ONNX Runtime .* cannot load .*[Oo]pset 99",
            id="opset-too-new",
        ),
        pytest.param(
            _graph(
                [helper.make_node("Transpose", ["x"], ["y"], perm=[1, 0])],
                [("x", T.FLOAT, ["N", 16])],
                [("y", T.FLOAT, [16, "N"])],
            ).SerializeToString(),
            r"no output has the batch as its first axis \(\{'y': \[16, 1\]\}\)",
            id="transposed-output",
        ),
        pytest.param(
            _graph(
                [helper.make_node("Cast", ["x"], ["y"], to=T.FLOAT)],
                [("x", T.UINT16, ["N", 4])],
                [("y", T.FLOAT, ["N", 4])],
            ).SerializeToString(),
            r"input 'x' is tensor\(uint16\), which requests and results cannot carry",
            id="uint16-input",
        ),
    ],
)
def test_refuses_what_cannot_be_served_and_adds_nothing(
    tmp_path: Path, source: bytes, refused: str
) -> None:
    (tmp_path / "source.onnx").write_bytes(source)
    with pytest.raises(OwnModelRefused, match=refused):
        add_onnx(tmp_path / "repo", tmp_path / "source.onnx", "m")
    assert not (tmp_path / "repo" / "m").exists()


def test_external_weights_travel_with_the_model(tmp_path: Path) -> None:
    onnx.save_model(
        _matmul("N"),
        str(tmp_path / "source.onnx"),
        save_as_external_data=True,
        location="source.weights",
        size_threshold=0,
    )
    add_onnx(tmp_path / "repo", tmp_path / "source.onnx", "ext")
    version = ModelRepository(tmp_path / "repo").resolve("ext")
    assert (version.directory / "source.weights").stat().st_size == W.nbytes
    (tmp_path / "source.weights").unlink()  # the copy is what serves
    engine = OnnxRuntimeEngine(version)
    engine.load()
    x = np.ones((2, 16), np.float32)
    np.testing.assert_allclose(engine.infer({"x": x})["y"], x @ W, rtol=1e-6)


def _external(name: str, location: str) -> onnx.TensorProto:
    tensor = numpy_helper.from_array(np.zeros(2, np.float32), name)
    tensor.ClearField("raw_data")
    tensor.data_location = T.EXTERNAL
    tensor.external_data.add(key="location", value=location)
    return tensor


def test_external_files_are_found_wherever_a_tensor_lies(tmp_path: Path) -> None:
    """Initializers (a subgraph's too), a Constant's attribute, both If branches, a sparse
    initializer's values and indices, a sparse attribute, a node's tensor, sparse-tensor
    and graph lists, and a local function's node and default attribute each name their own
    file: each is found, once."""

    def branch(name: str, constant: str, initializer: str) -> onnx.GraphProto:
        return helper.make_graph(
            [helper.make_node("Constant", [], [name], value=_external(name, constant))],
            name,
            [],
            [helper.make_tensor_value_info(name, T.FLOAT, [2])],
            [_external(f"{name}_w", initializer)],
        )

    def sparse(values: str, indices: str) -> onnx.SparseTensorProto:
        index = _external("si", indices)
        index.data_type = T.INT64
        return helper.make_sparse_tensor(_external("sv", values), index, [2])

    function = helper.make_function(
        "local",
        "F",
        [],
        ["f"],
        [helper.make_node("Constant", [], ["f"], value=_external("f", "function.bin"))],
        [helper.make_opsetid("", 17)],
    )
    function.attribute_proto.append(helper.make_attribute("table", _external("d", "default.bin")))
    listed = helper.make_node("Custom", [], ["l"], domain="local")
    listed.attribute.extend(
        [
            helper.make_attribute("weights", [_external("l1", "listed.bin")]),
            helper.make_attribute("sparse", [sparse("listed-values.bin", "listed-idx.bin")]),
            helper.make_attribute("graphs", [branch("c", "listed-graph.bin", "listed-w.bin")]),
        ]
    )
    graph = helper.make_graph(
        [
            helper.make_node("Constant", [], ["k"], value=_external("k", "constant.bin")),
            helper.make_node(
                "Constant", [], ["sp"], sparse_value=sparse("attr-values.bin", "attr-idx.bin")
            ),
            helper.make_node(
                "If",
                ["cond"],
                ["y"],
                then_branch=branch("a", "then.bin", "then-w.bin"),
                else_branch=branch("b", "else.bin", "else-w.bin"),
            ),
            listed,
        ],
        "g",
        [helper.make_tensor_value_info("cond", T.BOOL, [])],
        [helper.make_tensor_value_info("y", T.FLOAT, [2])],
        [_external("w", "weights.bin"), _external("w2", "weights.bin")],
        sparse_initializer=[sparse("sparse-values.bin", "sparse-idx.bin")],
    )
    files = own._external_files(helper.make_model(graph, functions=[function]), tmp_path)
    assert len(files) == len(set(files))
    assert sorted(files) == sorted(
        [
            "weights.bin",
            "sparse-values.bin",
            "sparse-idx.bin",
            "constant.bin",
            "attr-values.bin",
            "attr-idx.bin",
            "then.bin",
            "then-w.bin",
            "else.bin",
            "else-w.bin",
            "listed.bin",
            "listed-values.bin",
            "listed-idx.bin",
            "listed-graph.bin",
            "listed-w.bin",
            "function.bin",
            "default.bin",
        ]
    )


def test_an_external_tensor_naming_no_file_is_refused(tmp_path: Path) -> None:
    weights = _external("w", "w.bin")
    del weights.external_data[:]
    model = helper.make_model(
        helper.make_graph(
            [], "g", [], [helper.make_tensor_value_info("w", T.FLOAT, [2])], [weights]
        )
    )
    onnx.save(model, str(tmp_path / "source.onnx"))
    with pytest.raises(OwnModelRefused, match=r"tensor 'w' keeps its data outside .* no file"):
        add_onnx(tmp_path / "repo", tmp_path / "source.onnx", "ext")
    assert not (tmp_path / "repo" / "ext").exists()


def test_missing_external_weights_are_named(tmp_path: Path) -> None:
    onnx.save_model(
        _matmul("N"),
        str(tmp_path / "source.onnx"),
        save_as_external_data=True,
        location="w.bin",
        size_threshold=0,
    )
    (tmp_path / "w.bin").unlink()
    with pytest.raises(OwnModelRefused, match=r"keeps weights in 'w.bin', which is not in"):
        add_onnx(tmp_path / "repo", tmp_path / "source.onnx", "ext")


def test_a_new_version_must_keep_the_signature(tmp_path: Path) -> None:
    v1 = _graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        [("x", T.FLOAT, ["N", 4])],
        [("y", T.FLOAT, ["N", 4])],
    )
    v2 = _graph(
        [helper.make_node("Add", ["x", "z"], ["y"])],
        [("x", T.FLOAT, ["N", 4]), ("z", T.FLOAT, ["N", 4])],
        [("y", T.FLOAT, ["N", 4])],
    )
    onnx.save(v1, str(tmp_path / "v1.onnx"))
    onnx.save(v2, str(tmp_path / "v2.onnx"))
    repo = tmp_path / "repo"
    add_onnx(repo, tmp_path / "v1.onnx", "m")
    with pytest.raises(OwnModelRefused, match=r"exists; pass --force"):
        add_onnx(repo, tmp_path / "v1.onnx", "m")
    assert add_onnx(repo, tmp_path / "v1.onnx", "m", new_version=True).version.version == "2"
    with pytest.raises(OwnModelRefused, match=r"adds input 'z' float32\[-1, 4\]"):
        add_onnx(repo, tmp_path / "v2.onnx", "m", new_version=True)
    assert ModelRepository(repo).versions("m") == ["1", "2"]


def test_cli_says_the_signature_and_the_notes(tmp_path: Path) -> None:
    onnx.save(_matmul(1), str(tmp_path / "fixed.onnx"))
    runner = CliRunner()
    args = [
        "add",
        "onnx",
        str(tmp_path / "fixed.onnx"),
        "--name",
        "fixed",
        "--dir",
        str(tmp_path / "repo"),
    ]
    result = runner.invoke(models_app, args)
    assert result.exit_code == 0, result.output
    assert "input  x: float32[-1, 16]" in result.output
    assert "note: input 'x' fixes the batch at 1" in result.output
    again = runner.invoke(models_app, args)
    assert again.exit_code == 1
    assert "exists; pass --force" in again.output


def test_an_empty_model_file_is_said_when_no_version_is_complete(tmp_path: Path) -> None:
    onnx.save(_matmul("N"), str(tmp_path / "m.onnx"))
    add_onnx(tmp_path, tmp_path / "m.onnx", "m")
    (tmp_path / "m" / "1" / "READY").unlink()
    (tmp_path / "m" / "1" / "model.onnx").write_bytes(b"")
    with pytest.raises(
        ModelNotFound, match=r"no complete version folder \(1/model.onnx is empty\)"
    ):
        ModelRepository(tmp_path).resolve("m")


def test_a_model_that_mixes_the_batch_is_served_one_at_a_time(tmp_path: Path) -> None:
    """y = x - the batch's mean: batched, a sample's answer would depend on its batch-mates."""
    onnx.save(
        _graph(
            [
                helper.make_node("ReduceMean", ["x"], ["mean"], axes=[0], keepdims=1),
                helper.make_node("Sub", ["x", "mean"], ["y"]),
            ],
            [("x", T.FLOAT, ["N", 4])],
            [("y", T.FLOAT, ["N", 4])],
        ),
        str(tmp_path / "mix.onnx"),
    )
    added = add_onnx(tmp_path / "repo", tmp_path / "mix.onnx", "mix")
    assert added.version.config.batching.max_batch_size == 1
    assert ModelRepository(tmp_path / "repo").config("mix").batching.max_batch_size == 1
    assert "depend on the samples batched with it" in " ".join(added.notes)

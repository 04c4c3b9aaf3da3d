"""`inferbus models add onnx`: serve an ONNX file of your own, its model.yaml read off the graph.

The version folder is assembled under a hidden name, loaded and run there by the worker's
own engine, and renamed in only when that works, so a worker never sees a model it cannot
serve. What cannot be served is refused with the tensor and what to change.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from infra.models.config import BatchingConfig, ModelConfig, TensorSpec
from infra.models.lookups import lookup_rows
from infra.models.repository import MODEL_FILE, READY_MARKER, ModelVersion
from schemas.errors import InferbusError
from schemas.tensors import Arrays
from schemas.topics import is_legal_model_name
from services.worker.engines.inputs import check_outputs
from services.worker.engines.shapes import sample_batch, warmup_batches

WIRE_DTYPES = {
    "tensor(float)": "float32",
    "tensor(float16)": "float16",
    "tensor(double)": "float64",
    "tensor(int64)": "int64",
    "tensor(int32)": "int32",
    "tensor(int16)": "int16",
    "tensor(int8)": "int8",
    "tensor(uint8)": "uint8",
    "tensor(bool)": "bool",
}
"""ONNX Runtime's tensor types the wire format carries, by their wire name."""
CHECK_REQUESTS = 3
"""Requests run batched and alone to check that a sample's answer ignores its batch-mates."""


class OwnModelRefused(InferbusError):
    """The ONNX file cannot be served as it is; nothing was added."""


@dataclass(frozen=True)
class Added:
    """The version folder written, and what was left out or changed on the way, said."""

    version: ModelVersion
    notes: list[str]


def _sparse(tensor: onnx.SparseTensorProto) -> Iterator[onnx.TensorProto]:
    yield tensor.values
    yield tensor.indices


def _attribute_tensors(attribute: onnx.AttributeProto) -> Iterator[onnx.TensorProto]:
    """The tensors an attribute holds, its subgraphs' included."""
    if attribute.HasField("t"):
        yield attribute.t
    yield from attribute.tensors
    if attribute.HasField("sparse_tensor"):
        yield from _sparse(attribute.sparse_tensor)
    for sparse in attribute.sparse_tensors:
        yield from _sparse(sparse)
    if attribute.HasField("g"):
        yield from _graph_tensors(attribute.g)
    for graph in attribute.graphs:
        yield from _graph_tensors(graph)


def _node_tensors(nodes: Iterable[onnx.NodeProto]) -> Iterator[onnx.TensorProto]:
    """The tensors nodes' attributes hold, their subgraphs' included."""
    for node in nodes:
        for attribute in node.attribute:
            yield from _attribute_tensors(attribute)


def _graph_tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    """Every tensor a graph holds: initializers (sparse ones too) and its nodes'."""
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield from _sparse(sparse)
    yield from _node_tensors(graph.node)


def _model_tensors(model: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    """Every tensor the model holds: its graph's and its local functions' (what external
    data can name), their default attribute values included. onnx's own walker is private
    (`external_data_helper`). Training graphs (`training_info`) are left out, as there:
    ONNX Runtime's inference does not read them."""
    yield from _graph_tensors(model.graph)
    for function in model.functions:
        yield from _node_tensors(function.node)
        for default in function.attribute_proto:  # a call without the attribute gets it
            yield from _attribute_tensors(default)


def _external_files(model: onnx.ModelProto, source: Path) -> list[str]:
    """The external-data files the graph's tensors name, relative to the model file;
    refused when a tensor kept outside names no file."""
    found: list[str] = []
    for tensor in _model_tensors(model):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        location = next((e.value for e in tensor.external_data if e.key == "location"), None)
        if not location:
            raise OwnModelRefused(
                f"{source}: tensor {tensor.name!r} keeps its data outside the model but names "
                "no file (no 'location' in its external_data)",
                path=str(source),
            )
        if location not in found:
            found.append(location)
    return found


def _read(source: Path) -> tuple[onnx.ModelProto, list[str]]:
    """The graph (weights left on disk) and its external-data files; refused when unreadable."""
    if not source.is_file():
        raise OwnModelRefused(f"{source} is not a file", path=str(source))
    if source.stat().st_size == 0:
        raise OwnModelRefused(f"{source} is empty", path=str(source))
    try:
        model = onnx.load(str(source), load_external_data=False)
    except Exception as exc:  # protobuf's DecodeError and friends share no useful base
        raise OwnModelRefused(
            f"{source} is not an ONNX model: {type(exc).__name__}: {exc}", path=str(source)
        ) from exc
    files = _external_files(model, source)
    for location in files:
        if Path(location).is_absolute() or ".." in Path(location).parts:
            raise OwnModelRefused(
                f"{source} keeps weights at {location!r}, outside its folder; save them "
                "beside it (onnx.save_model(..., location='weights.bin'))",
                path=str(source),
            )
        if not (source.parent / location).is_file():
            raise OwnModelRefused(
                f"{source} keeps weights in {location!r}, which is not in {source.parent}",
                path=str(source),
            )
    return model, files


def _spec(arg: Any, kind: str) -> TensorSpec | str:
    """model.yaml's spec of one graph input or output, or why it cannot be one."""
    dtype = WIRE_DTYPES.get(arg.type)
    if dtype is None:
        return f"{kind} {arg.name!r} is {arg.type}, which requests and results cannot carry"
    if kind == "input" and not arg.shape:
        return f"input {arg.name!r} has no batch axis (a scalar); re-export it as [N, ...]"
    # The first axis is the batch whatever the graph says (a graph that fixes it runs
    # that many samples at a time); other fixed sizes are kept, the rest are dynamic.
    shape = [
        dim if axis > 0 and isinstance(dim, int) and dim > 0 else -1
        for axis, dim in enumerate(arg.shape or [None])
    ]
    return TensorSpec(name=arg.name, dtype=dtype, shape=shape)


def graph_config(name: str, session: Any, max_batch_size: int) -> tuple[ModelConfig, list[str]]:
    """model.yaml for the session's graph, and notes on what was left out; refused when an
    input cannot be served."""
    notes: list[str] = []
    inputs: list[TensorSpec] = []
    for arg in session.get_inputs():
        spec = _spec(arg, "input")
        if isinstance(spec, str):
            raise OwnModelRefused(f"cannot serve it: {spec}", model=name)
        inputs.append(spec)
        if arg.shape and isinstance(arg.shape[0], int) and arg.shape[0] > 0:
            notes.append(
                f"input {arg.name!r} fixes the batch at {arg.shape[0]} ({arg.shape}): it runs "
                f"batches {arg.shape[0]} at a time"
            )
    for arg in session.get_overridable_initializers():
        notes.append(
            f"input {arg.name!r} has a default in the graph: left out, the default is used"
        )
    outputs: list[TensorSpec] = []
    for arg in session.get_outputs():
        spec = _spec(arg, "output")
        if isinstance(spec, str):
            notes.append(f"left out: {spec}")
        else:
            outputs.append(spec)
    if not inputs or not outputs:
        missing = "inputs" if not inputs else "output that results can carry"
        raise OwnModelRefused(f"cannot serve it: the graph has no {missing}", model=name)
    config = ModelConfig(
        name=name,
        inputs=inputs,
        outputs=outputs,
        batching=BatchingConfig(max_batch_size=max_batch_size),
    )
    return config, notes


def _loaded_on_cpu(version: ModelVersion) -> tuple[Any, ModelConfig]:
    """The worker's ONNX Runtime engine for `version`, loaded with the CPU provider alone (to
    check the model here whatever it serves on), and the config it runs."""
    from services.worker.engines.onnx_runtime import OnnxRuntimeEngine

    engine_config = version.config.engine.model_copy(update={"providers": ["cpu"]})
    config = version.config.model_copy(update={"engine": engine_config})
    engine = OnnxRuntimeEngine(
        ModelVersion(version.name, version.version, version.directory, config)
    )
    engine.load()
    return engine, config


def _without_unbatched(
    version: ModelVersion, limits: dict[str, int]
) -> tuple[ModelConfig, list[str]]:
    """model.yaml without the outputs that have no batch axis (a constant, a scalar, a
    transposed [16, N]): run at two batch sizes, they are the ones not one row a sample."""
    config = version.config
    engine, _ = _loaded_on_cpu(version)
    unbatched: dict[str, list[int]] = {}
    try:
        for samples in (1, 2):
            outputs = engine.infer(sample_batch(config, samples, index_limits=limits))
            for name, array in outputs.items():
                if array.ndim == 0 or array.shape[0] != samples:
                    unbatched.setdefault(name, list(array.shape))
    finally:
        engine.unload()
    kept = [spec for spec in config.outputs if spec.name not in unbatched]
    if not kept:
        raise OwnModelRefused(
            f"cannot serve it: no output has the batch as its first axis ({unbatched}); "
            "re-export the model with the batch first",
            model=config.name,
        )
    notes = [
        f"left out: output {name!r} has no batch axis (came back as {shape} for 1 sample)"
        for name, shape in unbatched.items()
    ]
    return config.model_copy(update={"outputs": kept}), notes


def _differs(batched: Arrays, alone: Arrays) -> list[str]:
    """Outputs whose batched rows differ from the sample run alone."""
    return [
        name
        for name, value in alone.items()
        if not np.allclose(batched[name], value, rtol=1e-4, atol=1e-5, equal_nan=True)
    ]


def check_served(version: ModelVersion, limits: dict[str, int]) -> list[str]:
    """Load and warm the version in the worker's engine (CPU), then compare requests run
    batched with each run alone; returns the outputs that differ (empty: none)."""
    from services.worker.execution import run_batch

    engine, config = _loaded_on_cpu(version)
    try:
        engine.warmup(warmup_batches(config, limits))
        requests = [
            sample_batch(config, 1, seed=seed, index_limits=limits)
            for seed in range(CHECK_REQUESTS)
        ]
        if config.batching.max_batch_size < len(requests):
            return []
        outcomes = run_batch(engine.infer, requests, [1] * len(requests), config, None)
        differ: list[str] = []
        for request, outcome in zip(requests, outcomes, strict=True):
            if outcome.outputs is None:
                raise OwnModelRefused(
                    f"cannot serve it: a batch failed: {outcome.error}", model=config.name
                )
            alone = engine.infer(request)
            check_outputs(config, 1, alone)
            differ += [name for name in _differs(outcome.outputs, alone) if name not in differ]
        return differ
    finally:
        engine.unload()


def _one_at_a_time(
    config: ModelConfig, differ: list[str], existing: Path
) -> tuple[ModelConfig, str]:
    """A model whose outputs depend on the batch-mates: a new one gets max_batch_size 1;
    an existing model.yaml is the user's, so it is told instead."""
    said = f"outputs {differ} of a sample depend on the samples batched with it"
    if existing.exists():
        return config, f"{said}: set batching.max_batch_size: 1 in {existing}"
    batching = config.batching.model_copy(update={"max_batch_size": 1})
    return config.model_copy(update={"batching": batching}), f"{said}: max_batch_size set to 1"


def _next_version(base: Path) -> str:
    taken = [int(d.name) for d in base.iterdir() if d.is_dir() and d.name.isdigit()]
    return str(max(taken, default=0) + 1)


def _signature(config: ModelConfig) -> dict[str, str]:
    """`input 'x'` → `float32[-1, 4]`, for every input and output."""
    return {
        f"{kind} {spec.name!r}": f"{spec.dtype}{spec.shape}"
        for kind, specs in (("input", config.inputs), ("output", config.outputs))
        for spec in specs
    }


def signature_changes(old: ModelConfig, new: ModelConfig) -> list[str]:
    """How `new`'s inputs and outputs differ from `old`'s: `adds input 'z' float32[-1, 4]`."""
    before, after = _signature(old), _signature(new)
    return [f"adds {key} {after[key]}" for key in after if key not in before] + [
        f"drops {key}" if key not in after else f"changes {key} from {value} to {after[key]}"
        for key, value in before.items()
        if after.get(key) != value
    ]


def add_onnx(
    root: Path, source: Path, name: str, *, new_version: bool = False, max_batch_size: int = 32
) -> Added:
    """Add `source` (and its external-data files) as `<root>/<name>/<next version>/`.

    A new model gets a model.yaml read off the graph. With `new_version`, an existing
    model gets the next version, which must have its model.yaml's inputs and outputs
    (model.yaml holds one signature for every version)."""
    import onnxruntime as ort

    if not is_legal_model_name(name):
        raise OwnModelRefused(f"name {name!r}: use lower-case letters, digits, '-' or '_'")
    base = Path(root) / name
    existing = base / "model.yaml"
    if existing.exists() and not new_version:
        raise OwnModelRefused(f"{base} exists; pass --force to add a new version", path=str(base))
    model, files = _read(source)
    try:
        options = ort.SessionOptions()
        options.log_severity_level = 3  # its warnings (an initializer among the inputs) are noted
        session = ort.InferenceSession(
            str(source), sess_options=options, providers=["CPUExecutionProvider"]
        )
    except Exception as exc:  # ORT raises its own pybind classes (InvalidProtobuf, Fail, ...)
        raise OwnModelRefused(
            f"ONNX Runtime {ort.__version__} cannot load {source}: {type(exc).__name__}: {exc}",
            path=str(source),
        ) from exc
    derived, notes = graph_config(name, session, max_batch_size)
    del session
    limits = lookup_rows(model.graph)
    created = not base.exists()
    base.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=base))
    try:
        shutil.copyfile(source, staging / MODEL_FILE)
        for location in files:
            (staging / location).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source.parent / location, staging / location)
        trial = ModelVersion(name, staging.name, staging, derived)
        derived, left_out = _without_unbatched(trial, limits)
        notes += left_out
        config = derived
        if existing.exists():
            config = ModelConfig.load(existing)
            changes = signature_changes(config, derived)
            if changes:
                raise OwnModelRefused(
                    f"{source} {'; '.join(changes)} against {existing}: model.yaml holds one "
                    f"signature for every version of {name!r}, and its workers and callers "
                    "follow the newest version; add it as a new model (another --name)",
                    model=name,
                )
        differ = check_served(ModelVersion(name, staging.name, staging, config), limits)
        if differ:
            config, note = _one_at_a_time(config, differ, existing)
            notes.append(note)
        (staging / READY_MARKER).touch()
        staging.chmod(0o755)  # mkdtemp made it 0700
        target = base / _next_version(base)
        os.replace(staging, target)
        if not existing.exists():
            config.dump(existing)  # last: a worker finds the model complete
    finally:
        if staging.exists():
            shutil.rmtree(staging)
        if created and not existing.exists() and base.exists():
            shutil.rmtree(base)
    return Added(ModelVersion(name, target.name, target, config), notes)

"""Inputs a model reads as row numbers of a table it holds, and how many rows each table has.

An embedding (token ids, token types, positions, any categorical feature) is an ONNX
`Gather` of a weight initializer at the indices an input gives. An index past the table
fails the whole batch in the engine, so the worker refuses it per request instead, with
a message naming the input and the table's size.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import onnx

PASS_THROUGH = frozenset({"Cast", "Identity", "Squeeze", "Unsqueeze", "Reshape", "Flatten"})
"""Ops that keep an index's value: an input cast to int64 (or reshaped) still indexes rows."""


def _axis(node: onnx.NodeProto) -> int:
    for attribute in node.attribute:
        if attribute.name == "axis":
            return int(attribute.i)
    return 0


def lookup_rows(graph: onnx.GraphProto) -> dict[str, int]:
    """{graph input: rows of the smallest weight table a `Gather` reads at its values}.

    Follows an input through ops that keep its values (`PASS_THROUGH`); inputs read any
    other way are left out (their bounds are not the graph's to tell)."""
    tables = {init.name: list(init.dims) for init in graph.initializer}
    origin: dict[str, str] = {
        graph_input.name: graph_input.name
        for graph_input in graph.input
        if graph_input.name not in tables
    }
    rows: dict[str, int] = {}
    for node in graph.node:  # ONNX orders nodes topologically
        if node.op_type in PASS_THROUGH and node.input and node.input[0] in origin:
            for output in node.output:
                origin[output] = origin[node.input[0]]
        elif node.op_type == "Gather" and len(node.input) == 2 and node.input[1] in origin:
            dims = tables.get(node.input[0])
            axis = _axis(node)
            if dims is None or not -len(dims) <= axis < len(dims):
                continue
            source = origin[node.input[1]]
            rows[source] = min(rows.get(source, dims[axis]), dims[axis])
    return rows


def model_lookup_rows(model_file: Path) -> dict[str, int]:
    """`lookup_rows` of a model file's graph ({} when there is no file: the `sim` engine).

    Reads the graph without external weights (their shapes are in the graph)."""
    if not model_file.is_file():
        return {}
    model = onnx.load(str(model_file), load_external_data=False)
    return lookup_rows(model.graph)


def merged_limits(*limits: Mapping[str, int]) -> dict[str, int]:
    """One exclusive upper bound per input: the smallest any source gives."""
    merged: dict[str, int] = {}
    for source in limits:
        for name, bound in source.items():
            merged[name] = min(merged.get(name, bound), bound)
    return merged

"""Whether the answers are right: sampled results against ONNX Runtime run directly.

A benchmark that reports a fast rate of wrong answers measures nothing. The load generator
keeps the inputs of every `keep_every`-th request it sends and the bytes of their results;
after the timed phases each kept result is compared, output by output, with what a plain
`onnxruntime.InferenceSession` on the model's file computes for the same inputs, one
request at a time (no batching, no padding, none of inferbus's engine code).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from schemas.result import InferenceResult

TOLERANCE = 1e-4
"""Largest |served - direct| taken as the same answer in float32: batching and padding
change the order of a sum, not its value beyond ~1e-6 (the peers' check uses 1e-4)."""
FP16_TOLERANCE = 1e-2
"""The same for an engine that runs in float16 (TensorRT's fp16)."""
KEEP_EVERY = 32
"""Every that-many-th request's answer is checked against ONNX Runtime run directly."""


@dataclass(frozen=True)
class Kept:
    """One sampled request: its id, the inputs it was sent with, and its result's bytes."""

    request_id: str
    inputs: Mapping[str, np.ndarray[Any, Any]]
    result: bytes


@dataclass(frozen=True)
class OutputCheck:
    """What the comparison found."""

    checked: int
    mismatched: int
    max_abs_diff: float | None
    worst_request_id: str | None
    tolerance: float
    reference: str

    @property
    def matched(self) -> bool:
        return self.checked > 0 and self.mismatched == 0

    def line(self) -> str:
        """One line for the bench's summary."""
        if self.checked == 0:
            return "outputs: none checked (no kept request answered ok)"
        verdict = "match" if self.matched else f"MISMATCH in {self.mismatched}"
        return (
            f"outputs: {self.checked} answers checked against {self.reference}, max |diff| "
            f"{self.max_abs_diff:.2g} (tolerance {self.tolerance:g}): {verdict}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "checked": self.checked,
            "mismatched": self.mismatched,
            "max_abs_diff": self.max_abs_diff,
            "worst_request_id": self.worst_request_id,
            "tolerance": self.tolerance,
            "reference": self.reference,
            "matched": self.matched,
        }


def check_outputs(
    model_file: Path, outputs: Sequence[str], kept: Sequence[Kept], *, tolerance: float
) -> OutputCheck:
    """Compare each kept `ok` result's `outputs` with a direct ONNX Runtime run."""
    session = ort.InferenceSession(str(model_file), providers=["CPUExecutionProvider"])
    checked = mismatched = 0
    worst: tuple[float, str] | None = None
    for sample in kept:
        result = InferenceResult.from_wire(sample.result)
        if result.status != "ok":
            continue
        direct = session.run(list(outputs), dict(sample.inputs))
        diff = max(
            _max_abs_diff(result.output(name), want) if name in result.outputs else math.inf
            for name, want in zip(outputs, direct, strict=True)
        )
        checked += 1
        mismatched += diff > tolerance
        if worst is None or diff > worst[0]:
            worst = (diff, sample.request_id)
    return OutputCheck(
        checked=checked,
        mismatched=mismatched,
        max_abs_diff=None if worst is None else worst[0],
        worst_request_id=None if worst is None else worst[1],
        tolerance=tolerance,
        reference=f"onnxruntime {ort.__version__} run directly (CPU)",
    )


def check_failure(report: Mapping[str, Any] | None) -> str | None:
    """Why a run's answer check (an `OutputCheck.to_json()`, None where the engine computes
    no outputs) fails the run: a mismatch, or nothing checked at all (no kept request
    answered `ok`, or too few requests to keep one), which would pass unverified."""
    if report is None:
        return None
    if report["checked"] == 0:
        return (
            "no answer was checked against ONNX Runtime run directly: none of the requests "
            f"kept for it was answered ok (one in {KEEP_EVERY} is kept: send more requests, "
            "and see the errors above)"
        )
    if report["mismatched"]:
        return (
            f"{report['mismatched']} of {report['checked']} answers checked differ from "
            f"ONNX Runtime run directly (max |diff| {report['max_abs_diff']:.3g}, request "
            f"{report['worst_request_id']})"
        )
    return None


def _max_abs_diff(got: np.ndarray[Any, Any], want: np.ndarray[Any, Any]) -> float:
    """Largest element difference; a shape that differs is as wrong as can be (inf)."""
    if got.shape != want.shape:
        return math.inf
    diff = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)), initial=0.0))
    return math.inf if math.isnan(diff) else diff  # a NaN is no match either

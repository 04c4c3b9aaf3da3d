"""Simulated engine: sleeps a calibrated a + b·units instead of computing; always labelled."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from pydantic import ValidationError

from infra.models.config import ModelConfig, SimConfig
from infra.models.repository import ModelVersion
from infra.yaml_unique import safe_load_unique
from schemas.errors import EngineError
from schemas.tensors import DTYPES, Arrays
from services.worker.engines.base import Engine, EngineInfo
from services.worker.engines.inputs import check_inputs

SIM_INFO = EngineInfo(backend="sim", provider="sim", simulated=True)
VERSION_SIM_FILE = "sim.yaml"
"""A version folder's own latency model and error rate, over model.yaml's `engine.sim`."""
_GOLDEN = 0.6180339887498949


def version_sim(directory: Path, default: SimConfig) -> SimConfig:
    """The version's `sim.yaml` when it has one, else `default`; EngineError naming the file
    when it cannot be read."""
    path = directory / VERSION_SIM_FILE
    if not path.exists():
        return default
    try:
        raw = safe_load_unique(path.read_text())
        return SimConfig.model_validate(raw if raw is not None else {})
    except (OSError, yaml.YAMLError, ValidationError) as exc:
        raise EngineError(f"{path} is not a valid sim config: {exc}", path=str(path)) from exc


def failing_samples(seeds: np.ndarray[Any, Any], error_rate: float) -> np.ndarray[Any, Any]:
    """Which samples a simulated bad version fails: a fixed `error_rate` share of the
    possible inputs, decided by each sample's seed (an all-zero sample fails only at 1)."""
    if error_rate <= 0:
        return np.zeros(seeds.shape, dtype=bool)
    failing: np.ndarray[Any, Any] = np.mod(np.abs(seeds) * _GOLDEN, 1.0) >= 1.0 - error_rate
    return failing


def sequence_input_name(config: ModelConfig) -> str | None:
    """The input whose axis 1 counts tokens: `batching.sequence_input`, else a tokenizer's ids."""
    if config.batching.sequence_input is not None:
        return config.batching.sequence_input
    return config.tokenizer.input_ids if config.tokenizer is not None else None


def work_units(config: ModelConfig, inputs: Mapping[str, np.ndarray[Any, Any]]) -> int:
    """Units the latency model charges: samples, or padded tokens (batch x sequence length).

    Padded, not real, tokens: an engine computes over the padding too, and calibration
    measures padded shapes.
    """
    first = inputs[config.inputs[0].name]
    batch = int(first.shape[0])
    if config.engine.sim.per == "sample":
        return batch
    name = sequence_input_name(config)
    array = inputs[name] if name is not None else first
    length = int(array.shape[1]) if array.ndim > 1 else 1
    return batch * length


def latency_ms(sim: SimConfig, units: int) -> float:
    """The modelled time of one batch."""
    return sim.a_ms + sim.b_ms * units


class SimEngine(Engine):
    """Outputs of the declared shapes and dtypes, a pure function of each sample's inputs.

    Each sample's outputs are filled with one value derived from the sum of its first input,
    so a result does not depend on which batch it rode in (zero padding leaves it unchanged).
    Dynamic non-batch output dimensions take the size of the same axis of the first input.
    """

    def __init__(
        self,
        model: ModelVersion,
        *,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        super().__init__(model)
        self._sleep = sleep
        self._clock = clock
        self._loaded = False
        self._warming = False
        self.sim = model.config.engine.sim
        """The latency model in use: the version's sim.yaml, else model.yaml's."""

    @property
    def info(self) -> EngineInfo:
        return SIM_INFO

    def load(self) -> None:
        self.sim = version_sim(self.model.directory, self.model.config.engine.sim)
        self._loaded = True

    def warmup(self, batches: list[Arrays]) -> None:
        # Simulated failures are the serving kind: warm-up passes unless every sample fails.
        self._warming = True
        try:
            super().warmup(batches)
        finally:
            self._warming = False

    def infer(self, inputs: Mapping[str, np.ndarray[Any, Any]]) -> Arrays:
        if not self._loaded:
            raise EngineError("engine is not loaded", model=self.model.name)
        started = self._clock()
        config = self.model.config
        feed = check_inputs(config, inputs)
        first = feed[config.inputs[0].name]
        batch = first.shape[0]
        seeds = first.reshape(batch, -1).astype(np.float64).sum(axis=1)
        outputs: Arrays = {}
        for spec in config.outputs:
            shape = [batch] + [
                (first.shape[axis] if axis < first.ndim else 1) if dim == -1 else dim
                for axis, dim in enumerate(spec.shape[1:], start=1)
            ]
            dtype = DTYPES[spec.dtype]
            if dtype.kind == "f":
                values = (np.mod(seeds, 997.0) / 997.0).astype(dtype)
            elif dtype.kind == "b":
                values = np.mod(seeds, 2.0) == 1.0
            else:
                values = np.mod(seeds, 97.0).astype(dtype)
            outputs[spec.name] = np.broadcast_to(
                values.reshape([batch] + [1] * (len(shape) - 1)), shape
            ).copy()
        remaining_s = latency_ms(self.sim, work_units(config, feed)) / 1000
        remaining_s -= self._clock() - started
        if remaining_s > 0:
            self._sleep(remaining_s)
        failing = int(failing_samples(seeds, self.sim.error_rate).sum())
        if failing and (not self._warming or self.sim.error_rate >= 1):
            raise EngineError(
                f"simulated failure: {failing} of {batch} samples (sim error_rate "
                f"{self.sim.error_rate:g})",
                model=self.model.name,
            )
        return outputs

    def unload(self) -> None:
        self._loaded = False

"""Builders for scaler tests: signals with sensible defaults, a fake clock, scripts/."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from scaler.signals import GroupSignals


def make_signals(**overrides: Any) -> GroupSignals:
    """An interactive group at its target: 4 replicas, 300/s each, SLO 500 ms, no queue."""
    base = GroupSignals(
        group="inferbus.workers.m.interactive",
        model="m",
        tier="interactive",
        replicas=4,
        ready_replicas=4,
        partitions=12,
        slo_p99_e2e_ms=500.0,
        collected_at=0.0,
        arrival_rps=840.0,
        service_rps_per_replica=300.0,
        achieved_batch_size=8.0,
        lag=10,
        oldest_age_ms=20.0,
        queue_p99_ms=20.0,
        engine_p99_ms=150.0,
        e2e_p99_ms=180.0,
        utilization=0.7,
        time_to_ready_s=40.0,
        min_replicas=1,
        max_replicas=None,
        warm_replicas=1,
    )
    return dataclasses.replace(base, **overrides)


class FakeClock:
    """Seconds that advance only when told to."""

    def __init__(self, start: float = 0.0) -> None:
        self.now = start

    def tick(self, seconds: float) -> float:
        self.now += seconds
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


SCRIPTS = Path(__file__).parents[3] / "scripts"


def load_script(name: str) -> ModuleType:
    """`scripts/NAME.py` as a module: the scripts are run by path, not imported as a package."""
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module

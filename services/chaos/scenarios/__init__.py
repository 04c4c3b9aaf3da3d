"""The chaos scenarios by name, in the order `inferbus chaos` runs them."""

from __future__ import annotations

from typing import Any

from services.chaos.scenarios import (
    broker_restart,
    ingest_kill,
    malformed,
    overload,
    poison,
    rebalance,
    worker_freeze,
    worker_kill,
)
from services.chaos.scenarios.base import ScenarioSpec

SCENARIOS: dict[str, ScenarioSpec[Any]] = {
    spec.name: spec
    for spec in (
        poison.SPEC,
        malformed.SPEC,
        worker_kill.SPEC,
        worker_freeze.SPEC,
        ingest_kill.SPEC,
        rebalance.SPEC,
        overload.SPEC,
        broker_restart.SPEC,
        broker_restart.CLIENT_SPEC,
    )
}

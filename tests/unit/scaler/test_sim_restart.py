"""The simulator's scaler restart: with recall it goes on as if it had not stopped."""

from __future__ import annotations

import dataclasses

import pytest

from scaler.config import PolicyConfig
from scaler.sim.engine import SimRun, simulate
from scaler.sim.params import SimParams
from scaler.sim.scenarios import scenario
from scaler.sim.workload import WorkloadError

PARAMS = SimParams(initial_replicas=2, drain_s=60.0)


def _run(**changes: object) -> SimRun:
    return simulate(
        scenario("burst", 1), dataclasses.replace(PARAMS, **changes), "slo", PolicyConfig()
    )


def test_a_restart_that_recalls_decides_as_if_it_had_not_stopped() -> None:
    still = _run()
    recalled = _run(scaler_restart_at_s=700.0)
    assert recalled.ticks == still.ticks
    assert recalled.lines == still.lines


def test_a_restart_with_no_memory_starts_over() -> None:
    still = _run()
    forgot = _run(scaler_restart_at_s=700.0, scaler_recall=False)
    before = [t for t in forgot.ticks if t.t < 700.0]
    assert before == [t for t in still.ticks if t.t < 700.0]
    assert forgot.ticks != still.ticks


@pytest.mark.parametrize("at", [-1.0, float("nan")], ids=["negative", "nan"])
def test_a_restart_time_must_be_a_time_of_the_run(at: float) -> None:
    with pytest.raises(WorkloadError, match="scaler_restart_at_s"):
        dataclasses.replace(PARAMS, scaler_restart_at_s=at)

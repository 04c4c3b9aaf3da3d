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


def _run(config: PolicyConfig | None = None, **changes: object) -> SimRun:
    return simulate(
        scenario("burst", 1),
        dataclasses.replace(PARAMS, **changes),
        "slo",
        config or PolicyConfig(),
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


def test_a_restart_past_the_memory_replays_only_the_memory() -> None:
    """With 10 minutes of memory, a restart at minute 20 reads minutes 10 to 20 back (the
    first burst, minutes 6 to 8, is not read): that is all the memory the policy had kept,
    and the run goes on as its own. A restart with none differs in a third of the ticks."""
    short = PolicyConfig(burst_memory_s=600.0, headroom_memory_s=600.0, cap_hold_s=300.0)
    still = _run(short)
    assert _run(short, scaler_restart_at_s=1200.0).ticks == still.ticks
    forgot = _run(short, scaler_restart_at_s=1200.0, scaler_recall=False)
    after = [(a, b) for a, b in zip(still.ticks, forgot.ticks, strict=True) if a.t >= 1200.0]
    assert sum(a != b for a, b in after) > len(after) / 5


def test_the_restart_must_come_before_the_run_ends() -> None:
    with pytest.raises(WorkloadError, match="after the run ends"):
        _run(scaler_restart_at_s=10_000.0)


@pytest.mark.parametrize("at", [-1.0, float("nan")], ids=["negative", "nan"])
def test_a_restart_time_must_be_a_time_of_the_run(at: float) -> None:
    with pytest.raises(WorkloadError, match="scaler_restart_at_s"):
        dataclasses.replace(PARAMS, scaler_restart_at_s=at)

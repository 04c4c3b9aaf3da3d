"""The simulator's scaler restart: with recall it goes on as if it had not stopped."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

import scaler.sim.engine as engine
from scaler.config import PolicyConfig
from scaler.recall import Recall
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


def test_the_simulated_restart_starts_from_the_newest_checkpoint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As the live scaler's: the records carry the memory every 5 minutes."""
    recalls: list[Recall] = []
    real = engine.recall

    def recording(*args: Any, **kwargs: Any) -> Recall:
        recalls.append(real(*args, **kwargs))
        return recalls[-1]

    still = _run()
    monkeypatch.setattr(engine, "recall", recording)
    recalled = _run(scaler_restart_at_s=700.0)
    (got,) = recalls
    assert got.from_checkpoint is not None and 700.0 - 300.0 <= got.from_checkpoint < 700.0
    assert got.checkpoint_problems == {}
    assert recalled.ticks == still.ticks


def test_a_restart_with_no_memory_starts_over() -> None:
    still = _run()
    forgot = _run(scaler_restart_at_s=700.0, scaler_recall=False)
    before = [t for t in forgot.ticks if t.t < 700.0]
    assert before == [t for t in still.ticks if t.t < 700.0]
    assert forgot.ticks != still.ticks


def test_a_restart_long_after_a_burst_replays_only_what_its_span_reaches() -> None:
    """With 10 minutes of memory, a restart at second 1,400 replays from second 500 (the
    memory and half of it again; the first burst, seconds 360 to 480, is not read): that
    is all the memory the policy had kept, and the run goes on as its own. A restart with
    none differs in a fifth of the ticks or more."""
    short = PolicyConfig(burst_memory_s=600.0, headroom_memory_s=600.0, cap_hold_s=300.0)
    still = _run(short)
    assert _run(short, scaler_restart_at_s=1400.0).ticks == still.ticks
    forgot = _run(short, scaler_restart_at_s=1400.0, scaler_recall=False)
    after = [(a, b) for a, b in zip(still.ticks, forgot.ticks, strict=True) if a.t >= 1400.0]
    assert sum(a != b for a, b in after) > len(after) / 5


def test_no_scaler_decides_through_the_gap_before_the_new_one_starts() -> None:
    """The scaler is gone from second 880 to 920; the second burst starts at 900."""
    still = _run()
    gapped = _run(scaler_restart_at_s=880.0, scaler_restart_gap_s=40.0)
    assert [t for t in gapped.ticks if t.t < 880.0] == [t for t in still.ticks if t.t < 880.0]
    gap = [t for t in gapped.ticks if 880.0 <= t.t < 920.0]
    assert len(gap) == 8
    assert all(t.desired == t.replicas and t.diagnosis == "no_scaler" for t in gap)
    assert not [line for line in gapped.lines if 880.0 <= float(line[2:9]) < 920.0]
    # Without the gap the burst was met within it; after it the new scaler meets it.
    assert any(t.desired > t.replicas for t in still.ticks if 900.0 <= t.t < 920.0)
    assert any(t.desired > t.replicas for t in gapped.ticks if 920.0 <= t.t < 960.0)


def test_a_restart_after_a_gap_recalls_what_a_pause_would_have_kept() -> None:
    """The reference recall is measured against, a scaler that pauses for the gap with its
    memory: without a gap it is the run with no restart; with one, recall (within the
    memory) gives its run."""
    still = _run()
    assert _run(scaler_restart_at_s=880.0, scaler_restart_keeps_memory=True).ticks == still.ticks
    paused = _run(
        scaler_restart_at_s=880.0, scaler_restart_gap_s=40.0, scaler_restart_keeps_memory=True
    )
    recalled = _run(scaler_restart_at_s=880.0, scaler_restart_gap_s=40.0)
    assert recalled.ticks == paused.ticks
    assert recalled.ticks != still.ticks


def test_the_restart_must_come_before_the_run_ends() -> None:
    with pytest.raises(WorkloadError, match="after the run ends"):
        _run(scaler_restart_at_s=10_000.0)


@pytest.mark.parametrize("at", [-1.0, float("nan")], ids=["negative", "nan"])
def test_a_restart_time_must_be_a_time_of_the_run(at: float) -> None:
    with pytest.raises(WorkloadError, match="scaler_restart_at_s"):
        dataclasses.replace(PARAMS, scaler_restart_at_s=at)

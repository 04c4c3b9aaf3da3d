"""Simulator queues: each consumer serves the partitions it owns live, or one pooled FIFO."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from infra.assignment import balanced_assignment
from scaler.sim.group import GroupSim
from scaler.sim.oracle import keep_servers, oracle
from scaler.sim.params import QueueModel, ServiceModel, SimParams
from scaler.sim.workload import TierArrivals

# One request at a time, 10 ms each: 100 requests/s per replica.
ONE_AT_A_TIME = ServiceModel(a_ms=10, b_ms=0, per="sample", max_batch_size=1, max_queue_delay_ms=0)
PARAMS = SimParams(service=ONE_AT_A_TIME, partitions=12, handover_pause_s=0)


def _arrivals(rate: float, seconds: float = 60.0) -> TierArrivals:
    times = np.arange(0.0, seconds, 1 / rate)
    return TierArrivals(times, np.ones(times.size))


def _served(queues: QueueModel, replicas: int, rate: float) -> GroupSim:
    g = GroupSim("g", "interactive", _arrivals(rate), dataclasses.replace(PARAMS, queues=queues))
    g.start_with(replicas)
    g.advance(1e9)
    return g


@pytest.mark.parametrize("queues", ["partition", "shared"])
def test_every_request_is_served_once_and_in_order_within_its_partition(
    queues: QueueModel,
) -> None:
    g = _served(queues, 5, 300.0)
    assert not np.isnan(g.end_t).any() and not g.unserved_left()
    assert np.all(g.close_t >= g.times) and np.all(g.end_t > g.close_t)
    for p in range(12):
        closes = g.close_t[g.partition_of == p]
        assert np.all(np.diff(closes) >= 0), f"partition {p} served out of order"


def test_uneven_shares_overload_the_members_with_more_partitions() -> None:
    """5 consumers of 12 partitions: two own 3 (1.25x the mean load), three own 2.

    At 84 % of pooled capacity the pooled FIFO keeps up; the 3-partition members get
    105 requests/s against 100 and fall behind, and only their partitions wait.
    """
    rate = 420.0
    shared = _served("shared", 5, rate)
    split = _served("partition", 5, rate)
    assert float(np.percentile(shared.end_t - shared.times, 99)) < 0.2
    e2e = split.end_t - split.times
    assert float(np.percentile(e2e, 99)) > 1.0
    ids = [r.member_id for r in split.replicas]
    heavy = {p for owned in balanced_assignment(12, ids).values() if len(owned) == 3 for p in owned}
    on_heavy = np.isin(split.partition_of, sorted(heavy))
    assert float(e2e[~on_heavy].max()) < 0.2
    assert float(e2e[on_heavy].max()) > 1.0


def test_even_shares_keep_up_under_either_model() -> None:
    """4 consumers of 12 partitions own 3 each: the same 84 % load per member either way."""
    for queues in ("partition", "shared"):
        g = _served(queues, 4, 336.0)
        assert float(np.percentile(g.end_t - g.times, 99)) < 0.5, queues


def test_oracle_pays_for_uneven_shares() -> None:
    """The oracle serving partitions as live needs more replicas than a pooled FIFO."""
    arrivals = _arrivals(420.0, 180.0)
    pooled = oracle(arrivals, ONE_AT_A_TIME, 500.0, 180.0, step_s=60.0, floor=1, cap=12)
    split = oracle(
        arrivals, ONE_AT_A_TIME, 500.0, 180.0, step_s=60.0, floor=1, cap=12, partitions=12
    )
    assert max(pooled.replicas) == 5
    assert min(split.replicas) >= 6
    assert split.replica_seconds > pooled.replica_seconds


@pytest.mark.parametrize(
    ("positional", "n", "expected"),
    [
        # Serving partitions, server i is member i: its backlog stays with it.
        pytest.param(True, 2, [9.0, 1.0], id="partition-keeps-positions"),
        pytest.param(True, 4, [9.0, 1.0, 5.0, 3.0], id="partition-adds-free-now"),
        # Pooled, the servers that free up first stay.
        pytest.param(False, 2, [1.0, 5.0], id="pooled-keeps-earliest"),
    ],
)
def test_oracle_carries_busy_time_by_position_when_serving_partitions(
    positional: bool, n: int, expected: list[float]
) -> None:
    assert keep_servers([9.0, 1.0, 5.0], n, 3.0, positional=positional) == expected

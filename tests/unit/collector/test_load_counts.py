"""Service rate from the heartbeat's sample count, not its per-busy-second rate."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from scaler.collector.load import group_load
from schemas.telemetry import Heartbeat, WorkerLoad

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def test_count_over_the_interval_wins_over_samples_per_s() -> None:
    # What a worker sends (services/worker/app.py load_snapshot): 2 s interval, 30 % busy,
    # 33 samples, samples_per_s = samples / busy seconds = 33 / 0.6 = 55.
    beat = Heartbeat(
        instance_id="w",
        service="inferbus-worker",
        model="m",
        tiers=["interactive"],
        at=NOW - timedelta(seconds=1),
        interval_s=2.0,
        load=WorkerLoad(busy_fraction=0.3, samples=33, samples_per_s=55.0, mean_batch_size=1.5),
    )
    load = group_load([beat], "inferbus.workers.m.interactive", NOW, max_age_s=15)
    assert load.service_rps_per_replica == pytest.approx(55.0)  # was 55 / 0.3 = 183
    assert load.samples_per_s == pytest.approx(16.5)  # per wall second
    assert load.achieved_batch_size == pytest.approx(1.5)


def test_a_short_final_heartbeat_uses_its_own_window() -> None:
    """A stopping worker's last heartbeat covers 0.5 s of a 2 s interval."""
    beats = [
        Heartbeat(
            instance_id="steady",
            service="inferbus-worker",
            model="m",
            tiers=["interactive"],
            at=NOW - timedelta(seconds=1),
            interval_s=2.0,
            load=WorkerLoad(busy_fraction=0.5, samples=50, mean_batch_size=2.0, window_s=2.0),
        ),
        Heartbeat(
            instance_id="stopping",
            service="inferbus-worker",
            model="m",
            tiers=["interactive"],
            at=NOW - timedelta(seconds=1),
            interval_s=2.0,
            load=WorkerLoad(busy_fraction=0.4, samples=10, mean_batch_size=2.0, window_s=0.5),
        ),
    ]
    load = group_load(beats, "inferbus.workers.m.interactive", NOW, max_age_s=15)
    # 60 samples in 1.0 + 0.2 busy seconds: 50/s, not 60 / (1.0 + 0.8) = 33/s.
    assert load.service_rps_per_replica == pytest.approx(50.0)
    assert load.samples_per_s == pytest.approx(25.0 + 20.0)

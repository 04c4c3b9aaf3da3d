"""Per-replica throughput at the achieved batch size, from heartbeats' load."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from scaler.collector.load import group_load, heartbeat_group, latest
from schemas.telemetry import Heartbeat, WorkerLoad
from schemas.topics import Tier

NOW = datetime(2026, 1, 1, tzinfo=UTC)
GROUP = "inferbus.workers.m.interactive"


def hb(
    iid: str, busy: float, sps: float, batch: float, age_s: float = 1.0, tier: Tier = "interactive"
) -> Heartbeat:
    return Heartbeat(
        instance_id=iid,
        service="inferbus-worker",
        model="m",
        tiers=[tier],
        at=NOW - timedelta(seconds=age_s),
        interval_s=5.0,
        load=WorkerLoad(busy_fraction=busy, samples_per_s=sps, mean_batch_size=batch),
    )


@pytest.mark.parametrize(
    ("beats", "reporting", "util", "per_replica", "batch"),
    [
        pytest.param([], 0, None, None, None, id="none"),
        pytest.param([hb("a", 0.5, 100, 8)], 1, 0.5, 200.0, 8.0, id="one-half-busy"),
        pytest.param(
            [hb("a", 0.5, 100, 10), hb("b", 1.0, 100, 5)],
            2,
            0.75,
            200 / 1.5,
            200 / 30,
            id="two-workers-weighted",
        ),
        pytest.param([hb("a", 0.0, 0, 0)], 1, 0.0, None, None, id="idle-worker"),
        pytest.param([hb("a", 0.5, 100, 8, age_s=60)], 0, None, None, None, id="stale-dropped"),
        pytest.param([hb("a", 0.5, 100, 8, tier="batch")], 0, None, None, None, id="other-group"),
        pytest.param([hb("a", 1.7, 100, 8)], 1, 1.0, 100.0, 8.0, id="busy-clamped"),
    ],
)
def test_group_load(
    beats: list[Heartbeat],
    reporting: int,
    util: float | None,
    per_replica: float | None,
    batch: float | None,
) -> None:
    got = group_load(beats, GROUP, NOW, max_age_s=15)
    assert got.reporting == reporting
    assert got.utilization == (None if util is None else pytest.approx(util))
    assert got.service_rps_per_replica == (
        None if per_replica is None else pytest.approx(per_replica)
    )
    assert got.achieved_batch_size == (None if batch is None else pytest.approx(batch))


def test_latest_keeps_newest_and_group() -> None:
    old, new = hb("a", 0.1, 1, 1, age_s=9), hb("a", 0.9, 1, 1, age_s=1)
    assert latest(latest({}, new), old)["a"] == new
    assert heartbeat_group(new) == GROUP

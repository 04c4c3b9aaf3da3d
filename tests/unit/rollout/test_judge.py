"""The scaler's rollout step: a worse canary is rolled back once, with its numbers; a good one
is kept; decisions by hand are respected."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from infra.models.repository import ModelRepository
from infra.rollout.state import RolloutBook
from scaler.rollout.judge import RolloutJudge
from scaler.rollout.windows import VersionWindows
from schemas.rollout import RolloutRecord
from schemas.telemetry import Heartbeat, WorkerLoad
from tests.model_yaml import write_sim_model
from tracing.histogram import LatencyHistogram

NOW = 10_000.0


def repository(tmp_path: Path, rollout: dict[str, Any] | None) -> ModelRepository:
    write_sim_model(tmp_path, rollout=rollout)
    return ModelRepository(tmp_path)


ROLLOUT = {
    "stable": "1",
    "canary": "2",
    "share": 0.2,
    "verdict": {"window_s": 60, "min_requests": 20, "max_error_rate_increase": 0.05},
}


def beat(version: str, ok: int, errors: int, e2e_ms: float) -> Heartbeat:
    hist = LatencyHistogram()
    hist.record_many(np.full(ok, e2e_ms))
    return Heartbeat(
        instance_id=f"w-{version}",
        service="inferbus-worker",
        model="m",
        tiers=["interactive"],
        lane="stable" if version == "1" else "canary",
        model_version=version,
        at=datetime.fromtimestamp(NOW - 1, UTC),
        interval_s=2.0,
        load=WorkerLoad(busy_fraction=0.1, results={"ok": ok, "internal_error": errors}),
        histograms=[{"model": "m", "tier": "interactive", "stage": "e2e"} | hist.to_dict()],
    )


class Published:
    def __init__(self) -> None:
        self.records: list[RolloutRecord] = []

    async def __call__(self, record: RolloutRecord) -> None:
        self.records.append(record)


def judge_for(
    tmp_path: Path, rollout: dict[str, Any] | None, *beats: Heartbeat
) -> tuple[RolloutJudge, Published]:
    windows = VersionWindows(clock=lambda: NOW)
    for heartbeat in beats:
        windows.apply(heartbeat)
    published = Published()
    judge = RolloutJudge(
        repository(tmp_path, rollout), RolloutBook(), windows, published, clock=lambda: NOW
    )
    return judge, published


async def test_a_worse_canary_is_rolled_back_once_with_its_numbers(tmp_path: Path) -> None:
    judge, published = judge_for(
        tmp_path, ROLLOUT, beat("1", 500, 0, 10.0), beat("2", 30, 20, 10.0)
    )
    [record] = await judge.tick()
    assert published.records == [record]
    assert (record.state, record.share, record.by) == ("rolled_back", 0.0, "verdict")
    assert (record.stable, record.canary) == ("1", "2")
    assert record.evidence is not None
    assert record.evidence.rule == "error_rate"
    assert (record.evidence.canary.requests, record.evidence.canary.errors) == (50, 20)
    assert record.evidence.stable.requests == 500
    assert judge.book.get("m") == record
    assert await judge.tick() == []  # rolled back: not judged again


async def test_a_good_canary_is_kept(tmp_path: Path) -> None:
    judge, published = judge_for(tmp_path, ROLLOUT, beat("1", 500, 1, 10.0), beat("2", 50, 0, 11.0))
    assert await judge.tick() == []
    assert judge.verdicts["m"].action == "keep"
    assert published.records == []


async def test_a_canary_without_enough_results_waits(tmp_path: Path) -> None:
    judge, _ = judge_for(tmp_path, ROLLOUT, beat("1", 500, 0, 10.0), beat("2", 5, 5, 10.0))
    assert await judge.tick() == []
    assert judge.verdicts["m"].action == "wait"


async def test_a_canary_taken_out_by_hand_is_not_judged(tmp_path: Path) -> None:
    judge, published = judge_for(
        tmp_path, {**ROLLOUT, "share": 0.0}, beat("1", 500, 0, 10.0), beat("2", 30, 20, 10.0)
    )
    assert await judge.tick() == []
    assert "m" not in judge.verdicts and published.records == []


async def test_a_model_without_a_canary_is_not_judged(tmp_path: Path) -> None:
    judge, published = judge_for(tmp_path, None, beat("1", 500, 0, 10.0))
    assert await judge.tick() == []
    assert published.records == []

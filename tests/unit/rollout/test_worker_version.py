"""A worker follows its lane's version: it loads the wanted one and switches when the
rollout names another (promote, rollback of a promote), keeping the old one on failure."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from infra.models.config import ModelConfigError
from infra.models.repository import ModelRepository, ModelVersion
from infra.rollout.state import RolloutBook
from schemas.errors import EngineError
from schemas.rollout import RolloutRecord
from schemas.tensors import Arrays
from services.worker.engine_host import EngineHost
from services.worker.engines.base import Engine, EngineInfo
from services.worker.versions import LaneVersions, NoCanary
from tests.model_yaml import write_sim_model

CANARY = {"stable": "1", "canary": "2", "share": 0.1}


class FakeEngine(Engine):
    loads: list[str] = []
    broken: set[str] = set()

    @property
    def info(self) -> EngineInfo:
        return EngineInfo("fake", "cpu")

    def load(self) -> None:
        if self.model.version in self.broken:
            raise EngineError(f"version {self.model.version} is broken")
        self.loads.append(self.model.version)

    def infer(self, inputs: Mapping[str, np.ndarray[Any, Any]]) -> Arrays:
        return {}

    def warmup(self, batches: list[Arrays]) -> None:
        return None

    def unload(self) -> None:
        return None


@pytest.fixture
def repository(tmp_path: Path) -> ModelRepository:
    write_sim_model(tmp_path, versions=("1", "2", "3"))
    FakeEngine.loads = []
    FakeEngine.broken = set()
    return ModelRepository(tmp_path)


def host(
    repository: ModelRepository, wanted: list[str | None], pinned: str | None = None
) -> EngineHost:
    def factory(version: ModelVersion) -> Engine:
        return FakeEngine(version)

    return EngineHost(
        repository, "m", pinned_version=pinned, wanted=lambda: wanted[0], engine_factory=factory
    )


async def noop() -> None:
    return None


async def test_loads_the_wanted_version_not_the_newest(repository: ModelRepository) -> None:
    engine_host = host(repository, ["1"])
    await engine_host.load(on_warming=noop)
    assert engine_host.version is not None and engine_host.version.version == "1"


async def test_none_wanted_is_the_newest(repository: ModelRepository) -> None:
    engine_host = host(repository, [None])
    await engine_host.load(on_warming=noop)
    assert engine_host.version is not None and engine_host.version.version == "3"


async def test_switches_when_the_wanted_version_changes(repository: ModelRepository) -> None:
    wanted: list[str | None] = ["1"]
    engine_host = host(repository, wanted)
    await engine_host.load(on_warming=noop)
    switched = asyncio.Event()

    async def on_switched() -> None:
        switched.set()

    loop = asyncio.create_task(engine_host.reload_loop(0.01, on_switched))
    try:
        await asyncio.sleep(0.05)
        assert engine_host.version is not None and engine_host.version.version == "1"
        wanted[0] = "2"  # promoted
        await asyncio.wait_for(switched.wait(), 2)
        assert engine_host.version.version == "2"
        assert FakeEngine.loads == ["1", "2"]
    finally:
        loop.cancel()


async def test_a_version_that_fails_to_load_is_refused_and_the_old_serves(
    repository: ModelRepository,
) -> None:
    wanted: list[str | None] = ["1"]
    engine_host = host(repository, wanted)
    await engine_host.load(on_warming=noop)
    FakeEngine.broken = {"2"}
    wanted[0] = "2"
    loop = asyncio.create_task(engine_host.reload_loop(0.01, noop))
    try:
        await asyncio.sleep(0.1)
        assert engine_host.version is not None and engine_host.version.version == "1"
        assert FakeEngine.loads == ["1"]
    finally:
        loop.cancel()


async def test_a_pinned_worker_never_follows(repository: ModelRepository) -> None:
    wanted: list[str | None] = ["2"]
    engine_host = host(repository, wanted, pinned="1")
    await engine_host.load(on_warming=noop)
    assert engine_host.target() == "1"
    await asyncio.wait_for(engine_host.reload_loop(0.01, noop), 1)  # returns at once
    assert engine_host.version is not None and engine_host.version.version == "1"


def _with_rollout(repository: ModelRepository, rollout: dict[str, Any] | None) -> None:
    path = repository.root / "m" / "model.yaml"
    raw = yaml.safe_load(path.read_text())
    raw["rollout"] = rollout
    path.write_text(yaml.safe_dump(raw))


PROMOTED = RolloutRecord(
    model="m",
    stable="1",
    canary="2",
    state="promoted",
    share=0.0,
    reason="test",
    by="test",
    at=datetime(2025, 1, 1, tzinfo=UTC),
)


@pytest.mark.parametrize(
    ("rollout", "record", "lane", "pinned", "wanted", "setting"),
    [
        pytest.param(None, None, "stable", None, None, None, id="no-rollout-newest"),
        pytest.param(None, None, "stable", "2", None, "INFERBUS_WORKER_MODEL_VERSION", id="pin"),
        pytest.param(CANARY, None, "stable", None, "1", "rollout.stable", id="stable-lane"),
        pytest.param(CANARY, None, "canary", None, "2", "rollout.canary", id="canary-lane"),
        pytest.param(CANARY, PROMOTED, "stable", None, "2", "rollout.stable", id="promoted"),
        pytest.param({"stable": "1"}, None, "canary", None, "3", "rollout.canary", id="gone"),
    ],
)
def test_lane_versions(
    repository: ModelRepository,
    rollout: dict[str, Any] | None,
    record: RolloutRecord | None,
    lane: Any,
    pinned: str | None,
    wanted: str | None,
    setting: str | None,
) -> None:
    _with_rollout(repository, rollout)
    book = RolloutBook()
    if record is not None:
        book.put(record)
    versions = LaneVersions(repository, "m", lane, pinned=pinned, rollouts=book)
    assert versions.wanted(current="3") == wanted  # "3": the version served now
    assert versions.setting() == setting


def test_a_canary_worker_without_a_canary_is_refused(repository: ModelRepository) -> None:
    _with_rollout(repository, {"stable": "1"})
    versions = LaneVersions(repository, "m", "canary", pinned=None, rollouts=RolloutBook())
    with pytest.raises(NoCanary, match=r"no rollout\.canary"):
        versions.require()
    LaneVersions(repository, "m", "stable", pinned=None, rollouts=RolloutBook()).require()


def test_an_unreadable_model_yaml_keeps_the_version_served(repository: ModelRepository) -> None:
    versions = LaneVersions(repository, "m", "stable", pinned=None, rollouts=RolloutBook())
    (repository.root / "m" / "model.yaml").write_text("inputs: [")
    assert versions.wanted(current="2") == "2"
    with pytest.raises(ModelConfigError):
        versions.wanted(current=None)  # at start: refused, naming the problem

"""Ingest's canary split: which lane a request goes to, and never to a canary with no ready
worker."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from infra.registry import RegistryTable, fold
from infra.rollout.state import Effective, RolloutBook
from schemas.errors import ModelNotFound
from schemas.request import InferenceRequest
from schemas.rollout import RolloutRecord
from schemas.telemetry import InstanceRecord
from services.ingest.handlers import Route, handle_event
from services.ingest.lanes import LaneRouter, choose_lane, ready_versions
from services.ingest.settings import IngestSettings
from services.models.demo import mlp_config
from tests.unit.ingest.conftest import (
    NOW,
    PRODUCED_AT,
    FakeCatalog,
    encode,
    mlp_event,
    with_changes,
)

CANARY_GROUP = "inferbus.workers.demo-mlp.canary.interactive"
ROLLOUT = Effective("1", "2", 0.5, "request_id", "canary")


def request(**fields: Any) -> InferenceRequest:
    return InferenceRequest.model_validate({**mlp_event(), **fields})


CASES = [
    pytest.param(Effective(None, None, 0.0, "request_id", None), {}, "stable", id="no-rollout"),
    pytest.param(ROLLOUT, {"model_version": "2"}, "canary", id="names-the-canary"),
    pytest.param(ROLLOUT, {"model_version": "1"}, "stable", id="names-stable"),
    pytest.param(
        Effective("1", "2", 0.0, "request_id", "rolled_back"),
        {"model_version": "2"},
        "canary",
        id="names-a-rolled-back-canary",
    ),
    pytest.param(
        Effective("1", "2", 0.0, "request_id", "rolled_back"), {}, "stable", id="no-share"
    ),
    pytest.param(Effective("1", "2", 1.0, "request_id", "canary"), {}, "canary", id="all"),
]


@pytest.mark.parametrize(("rollout", "fields", "lane"), CASES)
def test_choose_lane(rollout: Effective, fields: dict[str, Any], lane: str) -> None:
    assert choose_lane(rollout, "demo-mlp", request(**fields)) == lane


def test_the_tenant_key_sends_a_tenants_requests_to_one_side() -> None:
    by_tenant = Effective("1", "2", 0.5, "tenant", "canary")
    for tenant in ("team-a", "team-b", "team-c", "team-d"):
        lanes = {
            choose_lane(by_tenant, "demo-mlp", request(request_id=f"r-{i}", tenant=tenant))
            for i in range(50)
        }
        assert len(lanes) == 1
    by_id = {
        choose_lane(by_tenant, "demo-mlp", request(request_id=f"r-{i}", tenant=None))
        for i in range(50)
    }
    assert by_id == {"stable", "canary"}  # no tenant: its request id decides


def instance(
    group: str,
    state: str,
    *,
    updated: datetime,
    lease_s: float = 6.0,
    version: str | None = "2",
) -> InstanceRecord:
    return InstanceRecord(
        instance_id=f"w-{group}-{state}-{version}",
        model_version=version,
        model="demo-mlp",
        tiers=["interactive"],
        group=group,
        groups=[group],
        state=state,  # type: ignore[arg-type]
        started_at=updated,
        updated_at=updated,
        lease_s=lease_s,
    )


def test_ready_versions_are_those_of_live_ready_members_only() -> None:
    now = datetime.now(UTC)
    table = RegistryTable()
    for record in (
        instance("g-ready", "ready", updated=now),
        instance("g-ready", "ready", updated=now, version="3"),
        instance("g-ready", "warming", updated=now, version="4"),
        instance("g-warming", "warming", updated=now),
        instance("g-lapsed", "ready", updated=now - timedelta(seconds=60)),
    ):
        table = fold(table, record)
    assert ready_versions(table, now) == {"g-ready": {"2", "3"}}


def test_a_canary_worker_on_another_version_takes_no_requests() -> None:
    """Canary 2 -> 3 and 3 refused to load: the worker kept serving 2 and took half the
    requests, for a version no longer in the plan."""
    registry = Registry()
    router = LaneRouter(RolloutBook(), registry)
    registry.add(instance(CANARY_GROUP, "ready", updated=datetime.now(UTC), version="1"))
    assert router.lane(request(), CANARY_MLP, "interactive") == "stable"
    registry.add(instance(CANARY_GROUP, "ready", updated=datetime.now(UTC), version="2"))
    assert router.lane(request(), CANARY_MLP, "interactive") == "canary"


class Registry:
    """What the router reads: (version, table), changed by the test."""

    def __init__(self) -> None:
        self.version = 0
        self.table = RegistryTable()

    def add(self, record: InstanceRecord) -> None:
        self.table = fold(self.table, record)
        self.version += 1

    def __call__(self) -> tuple[int, RegistryTable]:
        return self.version, self.table


CANARY_MLP = with_changes(
    mlp_config(), rollout={"stable": "1", "canary": "2", "share": 1.0, "key": "request_id"}
)


def test_the_router_waits_for_a_ready_canary_worker_of_the_tier() -> None:
    registry = Registry()
    router = LaneRouter(RolloutBook(), registry)
    assert router.lane(request(), CANARY_MLP, "interactive") == "stable"
    registry.add(instance(CANARY_GROUP, "ready", updated=datetime.now(UTC)))
    assert router.lane(request(), CANARY_MLP, "interactive") == "canary"
    assert router.lane(request(tier="batch"), CANARY_MLP, "batch") == "stable"


def test_the_router_follows_a_decision_on_the_bus() -> None:
    registry = Registry()
    registry.add(instance(CANARY_GROUP, "ready", updated=datetime.now(UTC)))
    book = RolloutBook()
    router = LaneRouter(book, registry)
    assert router.lane(request(), CANARY_MLP, "interactive") == "canary"
    book.put(
        RolloutRecord(
            model="demo-mlp",
            stable="1",
            canary="2",
            state="rolled_back",
            share=0.0,
            reason="test",
            by="test",
            at=NOW,
        )
    )
    assert router.lane(request(), CANARY_MLP, "interactive") == "stable"


def test_handle_event_routes_canary_requests_to_the_canary_topic() -> None:
    registry = Registry()
    registry.add(instance(CANARY_GROUP, "ready", updated=datetime.now(UTC)))
    catalog = FakeCatalog(configs={"demo-mlp": CANARY_MLP}, versions={"demo-mlp": ["1", "2"]})
    outcome = handle_event(
        encode(mlp_event()),
        produced_at=PRODUCED_AT,
        catalog=catalog,
        settings=IngestSettings(),
        now=NOW,
        router=LaneRouter(RolloutBook(), registry),
    )
    assert isinstance(outcome, Route)
    assert outcome.topic == "inferbus.req.demo-mlp.canary.interactive"
    assert outcome.key == b"r-1"


def test_a_version_neither_lane_serves_is_answered_naming_both() -> None:
    """It was told "they serve version '1'" or "'2'", by the lane the split happened to pick."""
    router = LaneRouter(RolloutBook(), Registry())
    with pytest.raises(ModelNotFound, match="the stable lane serves '1', the canary '2'"):
        router.lane(request(model_version="3"), CANARY_MLP, "interactive")

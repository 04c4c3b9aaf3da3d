"""leftover_targets: the groups of tier topics no model in the repository wants (a canary
lane's only when its model is gone)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from aiokafka.errors import KafkaConnectionError

import scaler.service
from scaler.collector.collector import GroupTarget, leftover_targets
from scaler.service import ScalerService
from tests.unit.scaler.test_retired_groups import Counted

WANTED = [GroupTarget("kept", "interactive"), GroupTarget("kept", "batch")]


@pytest.mark.parametrize(
    ("topic", "adopted"),
    [
        pytest.param(
            "inferbus.req.gone.interactive", GroupTarget("gone", "interactive"), id="model-gone"
        ),
        pytest.param("inferbus.req.kept.critical", GroupTarget("kept", "critical"), id="tier-gone"),
        pytest.param("inferbus.req.kept.interactive", None, id="wanted"),
        pytest.param(
            "inferbus.req.gone.canary.interactive",
            GroupTarget("gone", "interactive", "canary"),
            id="a-canary-lane-of-a-model-gone",
        ),
        pytest.param(
            "inferbus.req.kept.canary.interactive", None, id="a-canary-lane-of-a-model-there"
        ),
        pytest.param("inferbus.req.gone.nosuchtier", None, id="not-a-tier"),
        pytest.param("inferbus.results", None, id="results"),
        pytest.param("inferbus.ingest", None, id="ingest"),
        pytest.param("team-a.results", None, id="somebody-else-s"),
    ],
)
def test_only_unwanted_tier_topics_are_adopted(topic: str, adopted: GroupTarget | None) -> None:
    found = leftover_targets([topic, "inferbus.req.kept.batch"], WANTED, ["kept"])
    assert found == ([] if adopted is None else [adopted])


async def test_no_leftover_is_adopted_while_the_model_folder_is_missing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Not mounted yet: every group would look unwanted, and retire 30 s later.
    service = ScalerService("127.0.0.1:1", tmp_path / "not-mounted", Counted(0))
    with caplog.at_level(logging.WARNING, logger="scaler.service"):
        await service._adopt_leftovers()
    assert "event=leftovers_skipped" in caplog.text
    assert service.collector.groups == []


async def test_a_leftover_whose_queue_cannot_be_read_is_adopted_all_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Regression: a count that failed left the group out, and what it held waited for the
    next scaler to start. An empty one with no worker is still left alone."""
    (tmp_path / "models").mkdir()
    service = ScalerService("127.0.0.1:1", tmp_path / "models", Counted(0))
    monkeypatch.setattr(scaler.service, "REGISTRY_WAIT_S", 0.01)

    async def topic_names(bootstrap: str) -> list[str]:
        return ["inferbus.req.unread.interactive", "inferbus.req.empty.interactive"]

    async def unanswered(group: str, topic: str) -> int:
        if "unread" in group:
            raise KafkaConnectionError("the broker went away")
        return 0

    monkeypatch.setattr(scaler.service, "topic_names", topic_names)
    monkeypatch.setattr(service.sweeps, "unanswered", unanswered)
    with caplog.at_level(logging.WARNING, logger="scaler.service"):
        await service._adopt_leftovers()
    assert service.collector.groups == ["inferbus.workers.unread.interactive"]
    assert "event=leftover_unread group=inferbus.workers.unread.interactive" in caplog.text

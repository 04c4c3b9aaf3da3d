"""Topics and groups of a canary: provisioned only for models that name one, and collected."""

from __future__ import annotations

from pathlib import Path

from infra.models.repository import ModelRepository
from infra.topics import canary_models, repository_topics, standard_topics
from scaler.collector.collector import Collector, GroupTarget, targets_for
from scaler.collector.feeds import TelemetryFeed
from scaler.registry import Registry
from schemas.topics import ROLLOUTS
from tests.model_yaml import write_sim_model


def test_the_rollouts_topic_is_standard_and_compacted() -> None:
    [spec] = [s for s in standard_topics([]) if s.name == ROLLOUTS]
    assert spec.partitions == 1
    assert spec.configs == {"cleanup.policy": "compact"}


def test_canary_tier_topics_only_for_models_with_a_canary(tmp_path: Path) -> None:
    write_sim_model(tmp_path, "plain")
    write_sim_model(tmp_path, "pinned", rollout={"stable": "1"})
    write_sim_model(tmp_path, "canaried", rollout={"stable": "1", "canary": "2", "share": 0.1})
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "model.yaml").write_text("inputs: [")
    repository = ModelRepository(tmp_path)

    assert canary_models(repository) == ["canaried"]
    names = {spec.name for spec in repository_topics(repository, tier_partitions=3)}
    assert "inferbus.req.canaried.canary.interactive" in names
    assert "inferbus.req.plain.interactive" in names
    assert "inferbus.req.broken.interactive" in names  # its stable topics, as before
    assert not any(".canary." in n for n in names if ".canaried." not in n)


def test_the_collector_targets_canary_groups_per_tier(tmp_path: Path) -> None:
    write_sim_model(
        tmp_path,
        "canaried",
        rollout={"stable": "1", "canary": "2", "share": 0.1},
        tiers=["interactive"],
    )
    groups = {target.group for target in targets_for(ModelRepository(tmp_path))}
    assert groups == {
        "inferbus.workers.canaried.interactive",
        "inferbus.workers.canaried.canary.interactive",
    }


async def test_groups_of_a_canary_named_later_are_added_never_dropped(tmp_path: Path) -> None:
    write_sim_model(tmp_path, tiers=["interactive"])
    repository = ModelRepository(tmp_path)
    collector = Collector(
        "127.0.0.1:1",
        targets_for(repository),
        repository,
        registry=Registry("127.0.0.1:1"),
        telemetry=TelemetryFeed("127.0.0.1:1"),
    )
    assert collector.groups == ["inferbus.workers.m.interactive"]
    canary = GroupTarget("m", "interactive", "canary")
    assert await collector.add_targets([*targets_for(repository), canary]) == [canary.group]
    assert await collector.add_targets(targets_for(repository)) == []
    assert collector.groups == ["inferbus.workers.m.interactive", canary.group]
    assert collector.target(canary.group) == canary

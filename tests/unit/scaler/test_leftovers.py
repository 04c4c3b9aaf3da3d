"""leftover_targets: the stable-lane groups of tier topics no model in the repository wants."""

from __future__ import annotations

import pytest

from scaler.collector.collector import GroupTarget, leftover_targets

WANTED = [GroupTarget("kept", "interactive"), GroupTarget("kept", "batch")]


@pytest.mark.parametrize(
    ("topic", "adopted"),
    [
        pytest.param(
            "inferbus.req.gone.interactive", GroupTarget("gone", "interactive"), id="model-gone"
        ),
        pytest.param("inferbus.req.kept.critical", GroupTarget("kept", "critical"), id="tier-gone"),
        pytest.param("inferbus.req.kept.interactive", None, id="wanted"),
        pytest.param("inferbus.req.gone.canary.interactive", None, id="a-canary-lane"),
        pytest.param("inferbus.req.gone.nosuchtier", None, id="not-a-tier"),
        pytest.param("inferbus.results", None, id="results"),
        pytest.param("inferbus.ingest", None, id="ingest"),
        pytest.param("team-a.results", None, id="somebody-else-s"),
    ],
)
def test_only_unwanted_stable_tier_topics_are_adopted(
    topic: str, adopted: GroupTarget | None
) -> None:
    found = leftover_targets([topic, "inferbus.req.kept.batch"], WANTED)
    assert found == ([] if adopted is None else [adopted])

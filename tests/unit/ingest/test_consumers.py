"""Ingest's consumers: which topics each reads, how each paces its fetches, when a fetch
may park until the next burst of a rhythm; and how its routes spread over partitions."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from services.ingest.app import ROUTE_PARTS_OF, IngestService
from services.ingest.settings import IngestSettings
from services.models.demo import write_demo_models
from services.runtime.consumer import ConsumerOptions


async def test_critical_requests_have_a_consumer_of_their_own_that_never_paces(
    tmp_path: Path,
) -> None:
    """Interactive and batch lanes gather and follow rhythms; the critical lane waits
    latency first (`lane_waits`), so a critical record never waits for a parked fetch."""
    write_demo_models(tmp_path)
    ingest = IngestService("127.0.0.1:1", IngestSettings(models_dir=tmp_path))
    lanes = {
        tuple(topic for _, topic in consumer._group_topics): consumer.options
        for consumer in ingest.consumers
    }
    assert lanes == {
        ("inferbus.ingest.critical",): ConsumerOptions(critical=True),
        ("inferbus.ingest.interactive", "inferbus.ingest"): ConsumerOptions(
            gather=True, rhythm=True
        ),
        ("inferbus.ingest.batch",): ConsumerOptions(gather=True, rhythm=True, batch_lane=True),
    }


async def test_ingest_splits_a_large_poll_over_the_tier_topics_partitions(
    tmp_path: Path,
) -> None:
    """The workers sharing a tier topic get even shares of a large poll; small polls (and
    the workers' and clients' publishers, by default) go as one batch."""
    write_demo_models(tmp_path)
    ingest = IngestService("127.0.0.1:1", IngestSettings(models_dir=tmp_path))
    assert ingest.publisher.split_parts_of == ROUTE_PARTS_OF


@pytest.mark.parametrize(
    ("check_due_in_s", "checking", "may_park"),
    [
        pytest.param(4.0, False, True, id="check-far-off"),
        pytest.param(0.3, False, True, id="check-due-after-the-longest-park"),
        pytest.param(0.15, False, False, id="check-due-within-the-longest-park"),
        pytest.param(-0.01, False, False, id="check-due-now"),
        pytest.param(4.0, True, False, id="while-checking"),
    ],
)
async def test_no_fetch_parks_across_a_position_check(
    tmp_path: Path, check_due_in_s: float, checking: bool, may_park: bool
) -> None:
    """The check's broker requests are answered after the fetch in flight, while the poll
    and what it fetched wait for them: a parked fetch there held whole bursts back."""
    write_demo_models(tmp_path)
    ingest = IngestService("127.0.0.1:1", IngestSettings(models_dir=tmp_path))
    [interactive] = [c for c in ingest.consumers if c.options.rhythm and not c.options.batch_lane]
    every_s = interactive.options.position_check_s
    interactive._last_position_check = time.monotonic() + check_due_in_s - every_s
    interactive._checking_positions = checking
    assert interactive._may_park(0.2) is may_park


@pytest.mark.parametrize(
    "paced",
    [
        pytest.param({"gather": True}, id="gathering"),
        pytest.param({"rhythm": True}, id="following-a-rhythm"),
        pytest.param({"batch_lane": True}, id="batch-lane"),
    ],
)
def test_a_critical_lane_cannot_also_wait_for_company(paced: dict[str, bool]) -> None:
    with pytest.raises(ValueError, match="critical lane"):
        ConsumerOptions(critical=True, **paced)


async def test_ingest_narrows_its_models_to_the_tiers_it_is_told_run(tmp_path: Path) -> None:
    """`INFERBUS_INGEST_TIERS` reaches the catalog every request is checked against."""
    write_demo_models(tmp_path)
    ingest = IngestService(
        "127.0.0.1:1", IngestSettings(models_dir=tmp_path, tiers=["interactive"])
    )

    assert ingest.catalog.config("demo-mlp").tiers == ["interactive"]

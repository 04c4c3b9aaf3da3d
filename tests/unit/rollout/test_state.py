"""The rollout in force: model.yaml's block with the latest decision on the bus folded over."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from infra.models.config import RolloutConfig
from infra.rollout.state import Effective, RolloutBook, effective, lane_version
from schemas.rollout import RolloutRecord

AT = datetime(2025, 1, 1, tzinfo=UTC)
YAML = RolloutConfig(stable="1", canary="2", share=0.1, key="tenant")


def record(**fields: Any) -> RolloutRecord:
    base: dict[str, Any] = {
        "model": "m",
        "stable": "1",
        "canary": "2",
        "state": "rolled_back",
        "share": 0.0,
        "reason": "test",
        "by": "test",
        "at": AT,
    }
    return RolloutRecord.model_validate({**base, **fields})


CASES = [
    pytest.param(None, None, (None, None, 0.0, None), id="no-rollout"),
    pytest.param(
        RolloutConfig(stable="3"), record(), ("3", None, 0.0, "canary"), id="stable-pin-only"
    ),
    pytest.param(YAML, None, ("1", "2", 0.1, "canary"), id="yaml-share"),
    pytest.param(YAML, record(), ("1", "2", 0.0, "rolled_back"), id="rolled-back"),
    pytest.param(
        YAML, record(state="canary", share=0.5), ("1", "2", 0.5, "canary"), id="share-override"
    ),
    pytest.param(YAML, record(state="promoted"), ("2", "2", 0.0, "promoted"), id="promoted"),
    pytest.param(
        YAML, record(canary="3"), ("1", "2", 0.1, "canary"), id="decision-for-another-canary"
    ),
    pytest.param(
        YAML, record(stable="0"), ("1", "2", 0.1, "canary"), id="decision-for-another-stable"
    ),
    pytest.param(
        RolloutConfig(stable="2"),
        record(state="promoted"),
        ("2", None, 0.0, "canary"),
        id="promotion-made-permanent-in-yaml",
    ),
]


@pytest.mark.parametrize(("rollout", "decision", "expected"), CASES)
def test_effective(
    rollout: RolloutConfig | None,
    decision: RolloutRecord | None,
    expected: tuple[str | None, str | None, float, str | None],
) -> None:
    now = effective(rollout, decision)
    assert (now.stable, now.canary, now.share, now.state) == expected


def test_the_decision_in_force_is_named_and_the_key_is_yamls() -> None:
    decision = record()
    now = effective(YAML, decision)
    assert now.decision is decision and now.key == "tenant"
    assert effective(YAML, record(canary="9")).decision is None


@pytest.mark.parametrize(
    ("now", "stable", "canary"),
    [
        pytest.param(Effective(None, None, 0.0, "request_id", None), None, None, id="no-rollout"),
        pytest.param(Effective("1", "2", 0.1, "request_id", "canary"), "1", "2", id="canary"),
        pytest.param(Effective("2", "2", 0.0, "request_id", "promoted"), "2", "2", id="promoted"),
    ],
)
def test_lane_version(now: Effective, stable: str | None, canary: str | None) -> None:
    assert lane_version(now, "stable") == stable
    assert lane_version(now, "canary") == canary


def test_the_book_keeps_the_latest_record_per_model_and_forgets_on_a_tombstone() -> None:
    book = RolloutBook()
    book.observe(b"m", record(state="canary", share=0.2).model_dump_json().encode())
    book.observe(b"m", record().model_dump_json().encode())
    book.observe(b"other", record(model="other").model_dump_json().encode())
    assert book.get("m") == record()
    book.observe(b"m", None)
    assert book.get("m") is None
    assert book.get("other") is not None


def test_the_book_skips_records_it_cannot_read() -> None:
    book = RolloutBook()
    book.observe(b"m", b"{not json")
    book.observe(b"m", b'{"model": "m", "share": 2}')
    assert book.get("m") is None
    assert book.invalid == 2

"""The harness's events: valid ones parse, storms are told apart, and ingest's outcome for
every kind is one the ledger can match (by request id or by the DLQ's bytes)."""

from __future__ import annotations

import random
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest

from infra.models.config import ModelConfig
from schemas.errors import ModelNotFound
from schemas.request import InferenceRequest
from services.chaos.events import digest, nested, poison, valid
from services.chaos.model import MODEL, SimModel, write_model
from services.chaos.storm import BIG, KINDS, make, plan
from services.ingest.handlers import Answer, DeadLetter, Route, handle_event
from services.ingest.settings import IngestSettings

NOW = datetime.now(UTC)
DEADLINE_S = NOW.timestamp() + 60


class Catalog:
    """The chaos model only, queues empty."""

    def __init__(self) -> None:
        self.model = SimModel().config()

    def config(self, name: str) -> ModelConfig:
        if name != MODEL:
            raise ModelNotFound(f"model {name!r} is not in the repository", model=name)
        return self.model

    def has_version(self, name: str, version: str) -> bool:
        return name == MODEL and version == "1"

    def queue_depth(self, topic: str) -> int | None:
        return 0

    def drain_rate(self, topic: str) -> float | None:
        return None


def test_a_valid_event_is_a_request_with_its_deadline() -> None:
    event = valid(tier="batch", deadline_s=DEADLINE_S)
    request = InferenceRequest.model_validate_json(event.value)
    assert (request.request_id, request.tier, request.model) == (event.request_id, "batch", MODEL)
    assert request.deadline is not None
    assert request.deadline.timestamp() == pytest.approx(DEADLINE_S)
    assert event.kafka_key == (event.request_id or "").encode()


def test_poison_nests_the_tensor_data() -> None:
    event = poison(depth=1_000, tier="interactive", deadline_s=DEADLINE_S, key=b"k")
    assert nested(1_000).encode() in event.value
    assert event.value.count(b"[") == 1_000 + 1  # and the shape's one
    assert event.kafka_key == b"k"


def test_a_storm_plan_has_every_kind_and_the_big_ones() -> None:
    kinds = plan(100, 3, seed=1)
    counts = Counter(kinds)
    assert len(kinds) == 103 and counts[BIG] == 3
    assert set(counts) == set(KINDS)


def test_every_event_of_a_storm_is_told_apart() -> None:
    rng = random.Random(2)
    events = [make(kind, rng, DEADLINE_S) for kind in plan(300, 0, seed=2)]
    assert len({digest(e.value) for e in events}) == len(events)
    ids = [e.request_id for e in events if e.request_id is not None]
    assert len(set(ids)) == len(ids)


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> IngestSettings:
    root = write_model(tmp_path_factory.mktemp("models"), SimModel())
    return IngestSettings(models_dir=Path(root))


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_ingest_outcome_of_each_kind_matches_what_the_ledger_expects(
    kind: str, settings: IngestSettings
) -> None:
    event = make(kind, random.Random(3), DEADLINE_S)
    outcome = handle_event(
        event.value, produced_at=NOW, catalog=Catalog(), settings=settings, now=NOW
    )
    if isinstance(outcome, DeadLetter):
        assert outcome.value == event.value, "the DLQ record is matched by the event's bytes"
    elif isinstance(outcome, Answer):
        assert outcome.result.request_id == event.request_id, "answered under the id we expect"
        assert outcome.result.status != "ok"
    else:
        assert isinstance(outcome, Route)
        assert outcome.request.request_id == event.request_id
        assert kind == "control", f"a malformed {kind} event was routed"


@pytest.mark.parametrize(
    ("kind", "status"),
    [
        pytest.param("unknown-model", "model_not_found", id="unknown-model"),
        pytest.param("wrong-shape", "invalid_input", id="wrong-shape"),
        pytest.param(BIG, "invalid_input", id="big"),
    ],
)
def test_kinds_with_a_fixed_answer(kind: str, status: str, settings: IngestSettings) -> None:
    event = make(kind, random.Random(4), DEADLINE_S)
    outcome = handle_event(
        event.value, produced_at=NOW, catalog=Catalog(), settings=settings, now=NOW
    )
    assert isinstance(outcome, Answer) and outcome.result.status == status

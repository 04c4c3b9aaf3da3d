"""Request events parse as the wire format says; registry and decision records are read."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from infra.registry import fold_all
from schemas.parse import parse_request
from schemas.telemetry import InstanceRecord
from services.load.events import EventFactory, max_input_tokens, sample_inputs
from services.load.observe import decision_point, ingest_instances, replica_states, workers_of
from services.models.demo import encoder_config, mlp_config

TIMEOUTS = {"critical": 1_000, "interactive": 2_000, "batch": 3_000}


@pytest.mark.parametrize(
    ("config", "tier", "tokens", "shapes"),
    [
        (encoder_config(), "interactive", 37, {"input_ids": [1, 37], "attention_mask": [1, 37]}),
        (encoder_config(), "batch", 512, {"input_ids": [1, 512], "attention_mask": [1, 512]}),
        (mlp_config(), "critical", 99, {"x": [1, 16]}),  # no sequence input: length ignored
    ],
    ids=["encoder", "encoder-longest", "mlp"],
)
def test_events_are_valid_frames_with_the_id_swapped_in(
    config: Any, tier: str, tokens: int, shapes: dict[str, list[int]]
) -> None:
    factory = EventFactory(config, tenant="team-a", reply_to="r.t", timeout_ms=TIMEOUTS)
    ids = ["a" * 32, "b" * 32]
    parsed = [parse_request(factory(i, tier, tokens)) for i in ids]  # type: ignore[arg-type]
    for request_id, p in zip(ids, parsed, strict=True):
        request = p.request
        assert p.framed and request.request_id == request_id
        assert (request.model, request.tier, request.tenant) == (config.name, tier, "team-a")
        assert (request.reply_to, request.timeout_ms, request.created_at) == (
            "r.t", TIMEOUTS[tier], None,
        )  # fmt: skip
        assert {n: t.shape for n, t in request.inputs.items()} == shapes  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="32 characters"):
        factory("short", "interactive", 8)  # type: ignore[arg-type]


def test_encoder_inputs_are_token_ids_and_a_full_mask() -> None:
    inputs = sample_inputs(encoder_config(), 8, np.random.default_rng(0))
    ids, mask = np.asarray(inputs["input_ids"]), np.asarray(inputs["attention_mask"])
    assert ids.dtype == np.int64 and ids.min() >= 5 and ids.max() < 1000
    assert mask.tolist() == [[1] * 8]
    assert max_input_tokens(encoder_config()) == 512


NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)


def record(instance: str, state: str, **fields: Any) -> InstanceRecord:
    base: dict[str, Any] = {
        "instance_id": instance, "model": "m", "tiers": ["interactive"],
        "group": "inferbus.workers.m.interactive", "state": state, "started_at": NOW,
        "updated_at": NOW, "lease_s": 6.0, "partitions": 4,
    }  # fmt: skip
    return InstanceRecord.model_validate({**base, **fields})


def test_replica_states_from_the_registry() -> None:
    table = fold_all(
        [
            record("w1", "ready"),
            record("w2", "ready", partitions=0),  # joining: registered, no partition yet
            record("w3", "loading", partitions=None),
            record("w4", "warming"),
            record("w5", "draining"),
            record("w6", "ready", updated_at=NOW - timedelta(seconds=30)),  # lease ran out
            record("w7", "ready", group="inferbus.workers.m.batch", tiers=["batch"]),
            record("i1", "ready", model="", service="inferbus-ingest", group="inferbus.ingest"),
        ]
    )
    states = replica_states(table, "inferbus.workers.m.interactive", NOW)
    assert states == {"loading": 1, "warming": 1, "joining": 1, "ready": 1, "draining": 1}
    assert workers_of(table, "inferbus.workers.m.batch", NOW) == 1
    assert ingest_instances(table, NOW) == 1


def test_decision_records_on_the_run_clock() -> None:
    raw = {
        "schema_version": 1, "policy": "slo", "at": 1_000.5, "model": "m", "tier": "interactive",
        "group": "inferbus.workers.m.interactive", "current": 1, "desired": 3,
        "reasons": [{"code": "queue", "message": "queue p99 900 ms > budget 50 ms"}],
        "diagnosis": "backlog", "applied": True, "error": None,
        "signals": {"lag": 612, "arrival_rps": 240.5, "ready_replicas": 1, "replicas": 1,
                    "e2e_p99_ms": 1200.0, "queue_p99_ms": 900.0, "engine_p99_ms": None},
    }  # fmt: skip
    point = decision_point(raw, origin=990.0)
    assert point is not None
    assert (point.t_s, point.current, point.desired, point.applied) == (10.5, 1, 3, True)
    assert (point.lag, point.arrival_rps, point.ready, point.engine_p99_ms) == (612, 240.5, 1, None)
    assert point.line == "interactive 1→3 (backlog): queue p99 900 ms > budget 50 ms"
    assert decision_point({"at": "soon"}, 0.0) is None
    assert decision_point({**raw, "signals": None}, 990.0) is not None

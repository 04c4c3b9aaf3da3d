"""Ingest unit fixtures: a fake model catalog over the demo configs, settings, a fixed clock."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest

from infra.models.config import ModelConfig
from schemas.errors import ModelNotFound
from services.ingest.settings import IngestSettings
from services.models.demo import encoder_config, mlp_config

NOW = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)
"""The fixed 'now' of every ingest test; events were produced one second before."""
PRODUCED_AT = datetime(2025, 1, 1, 11, 59, 59, tzinfo=UTC)


def with_changes(config: ModelConfig, **changes: Any) -> ModelConfig:
    """A validated copy of a config with top-level fields replaced."""
    raw = config.model_dump()
    raw.update(changes)
    return ModelConfig.model_validate(raw)


@dataclass
class FakeCatalog:
    """The ModelCatalog protocol over in-memory configs, versions and queue depths."""

    configs: dict[str, ModelConfig]
    versions: dict[str, list[str]] = field(default_factory=dict)
    depths: dict[str, int] = field(default_factory=dict)
    rates: dict[str, float] = field(default_factory=dict)

    def config(self, name: str) -> ModelConfig:
        if name not in self.configs:
            raise ModelNotFound(f"model {name!r} is not in the repository", model=name)
        return self.configs[name]

    def has_version(self, name: str, version: str) -> bool:
        return version in self.versions.get(name, [])

    def queue_depth(self, topic: str) -> int | None:
        return self.depths.get(topic)

    def drain_rate(self, topic: str) -> float | None:
        return self.rates.get(topic)


@pytest.fixture
def catalog() -> FakeCatalog:
    """demo-mlp and demo-encoder as written by `inferbus models init`, plus restricted variants."""
    mlp = mlp_config()
    return FakeCatalog(
        configs={
            "demo-mlp": mlp,
            "demo-encoder": encoder_config(),
            "mlp-batch-only": with_changes(mlp, name="mlp-batch-only", tiers=["batch"]),
            "mlp-team-a": with_changes(mlp, name="mlp-team-a", allowed_tenants=["team-a"]),
            "mlp-nan-ok": with_changes(
                mlp,
                name="mlp-nan-ok",
                inputs=[{"name": "x", "dtype": "float32", "shape": [-1, 16], "allow_nan": True}],
            ),
        },
        versions={"demo-mlp": ["1", "2"], "demo-encoder": ["1"]},
    )


@pytest.fixture
def settings() -> IngestSettings:
    """Explicit limits (not the environment): 64 KiB events, 4 KiB tensors, 8 samples."""
    return IngestSettings(max_event_bytes=65_536, max_tensor_bytes=4_096, max_samples_per_request=8)


def mlp_event(**changes: Any) -> dict[str, Any]:
    """A valid wire-format v1 event for demo-mlp; a change of `...` removes the field."""
    event: dict[str, Any] = {
        "schema_version": 1,
        "request_id": "r-1",
        "model": "demo-mlp",
        "tier": "interactive",
        "inputs": {"x": {"dtype": "float32", "shape": [1, 16], "data": [[0.5] * 16]}},
        "reply_to": "inferbus.results",
        "tenant": "team-a",
    }
    for key, value in changes.items():
        if value is ...:
            event.pop(key, None)
        else:
            event[key] = value
    return event


def encode(event: Any) -> bytes:
    return json.dumps(event).encode()

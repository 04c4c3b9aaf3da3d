"""Every setting is read somewhere: one declared and never read is a knob that does nothing
(`INFERBUS_INGEST_POLL_MAX_RECORDS`, which docs/deploy.md told operators to lower for
memory, and `INFERBUS_WORKER_POLL_MAX_RECORDS` reached no consumer)."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest
from pydantic_settings import BaseSettings

from infra.security import KafkaSecuritySettings
from infra.settings import BrokerSettings, KafkaSettings
from scaler.settings import ScalerSettings
from services.ingest.settings import IngestSettings
from services.worker.settings import WorkerSettings

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("infra", "schemas", "scaler", "services", "tracing")
SETTINGS = (
    BrokerSettings,
    KafkaSettings,
    KafkaSecuritySettings,
    IngestSettings,
    WorkerSettings,
    ScalerSettings,
)


@cache
def attributes_read() -> frozenset[str]:
    """Every `x.name` read in the project's code (a field's declaration is not one)."""
    names: set[str] = set()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                    names.add(node.attr)
    return frozenset(names)


@pytest.mark.parametrize(
    ("settings", "field"),
    [(cls, name) for cls in SETTINGS for name in cls.model_fields],
    ids=lambda value: value if isinstance(value, str) else value.__name__,
)
def test_each_setting_is_read(settings: type[BaseSettings], field: str) -> None:
    assert field in attributes_read(), f"{settings.__name__}.{field} is never read"


async def test_ingests_poll_limit_reaches_every_consumer(tmp_path: Path) -> None:
    from services.ingest.app import IngestService

    service = IngestService("localhost:1", IngestSettings(models_dir=tmp_path, poll_max_records=7))
    assert [c.options.max_poll_records for c in service.consumers] == [7, 7, 7]

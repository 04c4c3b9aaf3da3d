"""Sends that fail after aiokafka's own retries are answered or dead-lettered, never a stall."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aiokafka.errors import KafkaError, KafkaTimeoutError
from aiokafka.structs import ConsumerRecord
from opentelemetry.trace import INVALID_SPAN

from schemas import headers as h
from schemas.topics import DLQ, INGEST, RESULTS
from services.ingest.app import IngestService
from services.ingest.handlers import Route, handle_event
from services.ingest.settings import IngestSettings
from services.models.demo import write_demo_models

EVENT = {
    "schema_version": 1,
    "request_id": "r-undeliverable",
    "model": "demo-mlp",
    "inputs": {"x": {"dtype": "float32", "shape": [1, 16], "data": [[0.5] * 16]}},
}


def record(value: bytes) -> ConsumerRecord[bytes, bytes]:
    return ConsumerRecord(INGEST, 0, 7, 0, 0, None, value, None, len(value), 0, ())


def service(tmp_path: Path, failing: tuple[str, ...]) -> tuple[IngestService, list[Any]]:
    write_demo_models(tmp_path)
    ingest = IngestService("127.0.0.1:1", IngestSettings(models_dir=tmp_path))
    sent: list[Any] = []

    async def raw_send(
        topic: str, key: bytes | None, value: bytes, headers: list[tuple[str, bytes]]
    ) -> asyncio.Future[Any]:
        if topic.startswith(failing):
            raise KafkaTimeoutError(f"no metadata for {topic}")
        sent.append((topic, value, headers))
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        future.set_result(None)
        return future

    ingest._raw_send = raw_send  # type: ignore[method-assign]
    return ingest, sent


def routed(ingest: IngestService, value: bytes) -> Route:
    outcome = handle_event(
        value,
        produced_at=datetime.now(UTC),
        catalog=ingest.catalog,
        settings=ingest.settings,
        now=datetime.now(UTC),
    )
    assert isinstance(outcome, Route)
    ingest.depths.reserve(outcome.topic)
    return outcome


async def test_a_route_that_cannot_be_sent_is_answered_internal_error(tmp_path: Path) -> None:
    ingest, sent = service(tmp_path, failing=("inferbus.req.",))
    value = json.dumps(EVENT).encode()
    await ingest._send(record(value), routed(ingest, value), INVALID_SPAN)
    await ingest.producer.stop()
    [(topic, payload, _)] = sent
    result = json.loads(payload)
    assert topic == RESULTS
    assert result["status"] == "internal_error"
    assert "inferbus.req.demo-mlp.interactive" in result["error"]["message"]
    assert ingest.depths.depth("inferbus.req.demo-mlp.interactive") in (None, 0)


async def test_when_the_answer_fails_too_the_original_goes_to_the_dlq(tmp_path: Path) -> None:
    ingest, sent = service(tmp_path, failing=("inferbus.req.", "team-replies"))
    value = json.dumps({**EVENT, "reply_to": "team-replies"}).encode()
    await ingest._send(record(value), routed(ingest, value), INVALID_SPAN)
    await ingest.producer.stop()
    [(topic, payload, headers)] = sent
    assert topic == DLQ
    assert payload == value, "the producer's original bytes"
    assert h.header(headers, h.ERROR_CODE) == "undeliverable"
    assert "team-replies" in (h.header(headers, h.ERROR_MESSAGE) or "")


async def test_a_dlq_that_cannot_be_written_raises_so_the_poll_is_retried(
    tmp_path: Path,
) -> None:
    ingest, _ = service(tmp_path, failing=("inferbus.req.", "inferbus.results", DLQ))
    value = json.dumps(EVENT).encode()
    with pytest.raises(KafkaError):
        await ingest._send(record(value), routed(ingest, value), INVALID_SPAN)
    await ingest.producer.stop()

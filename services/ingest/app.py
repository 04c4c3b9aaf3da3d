"""Ingest's Kafka wiring: a FastStream batch subscriber on `inferbus.ingest`.

A poll's events are validated, their outcomes produced with acks=all, and only after
every ack does FastStream commit (AckPolicy.NACK_ON_ERROR: a failed produce seeks back
and the poll is retried, so nothing is lost).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from aiokafka import ConsumerRecord
from faststream import AckPolicy, FastStream
from faststream.kafka import KafkaBroker
from faststream.kafka.annotations import KafkaMessage

from schemas import headers as h
from schemas.topics import DLQ, INGEST, INGEST_GROUP
from services.ingest.catalog import CachedModelCatalog, QueueDepths
from services.ingest.handlers import Answer, DeadLetter, Outcome, Route, dead_letter_headers, handle_event
from services.ingest.settings import IngestSettings
from services.models.repository import ModelRepository

log = logging.getLogger(__name__)


class IngestService:
    """Validates and routes request events; one instance per process."""

    def __init__(self, bootstrap: str, settings: IngestSettings | None = None) -> None:
        self.settings = settings or IngestSettings()
        self.bootstrap = bootstrap
        self.instance_id = self.settings.instance_id or f"ingest-{socket.gethostname()}-{os.getpid()}"
        self.depths = QueueDepths(bootstrap, refresh_ms=self.settings.queue_refresh_ms)
        repository = ModelRepository(self.settings.models_dir)
        self.depths.watch_models(repository.names())
        self.catalog = CachedModelCatalog(
            repository, refresh_s=self.settings.model_refresh_s, depths=self.depths
        )
        self.counts: Counter[str] = Counter()
        self.broker = KafkaBroker(
            bootstrap, acks="all", enable_idempotence=False, linger_ms=1, client_id=self.instance_id
        )
        self.ready = asyncio.Event()
        self.broker.subscriber(
            INGEST,
            group_id=INGEST_GROUP,
            batch=True,
            max_records=self.settings.poll_max_records,
            batch_timeout_ms=self.settings.poll_timeout_ms,
            auto_offset_reset="earliest",
            ack_policy=AckPolicy.NACK_ON_ERROR,
        )(self._on_batch)

    def app(self) -> FastStream:
        """The FastStream application (used by `inferbus ingest`)."""
        application = FastStream(self.broker, logger=log)
        application.on_startup(self._startup)
        application.after_startup(self._after_startup)
        application.on_shutdown(self.depths.stop)
        return application

    async def _startup(self) -> None:
        await self.depths.start()

    async def _after_startup(self) -> None:
        self.ready.set()
        log.info("event=ingest_ready instance=%s bootstrap=%s", self.instance_id, self.bootstrap)

    async def _on_batch(self, body: list[Any], message: KafkaMessage) -> None:
        records: Sequence[ConsumerRecord[bytes, bytes]] = message.raw_message  # type: ignore[assignment]
        now = datetime.now(UTC)
        outcomes = [
            (
                record,
                handle_event(
                    record.value,
                    produced_at=datetime.fromtimestamp(record.timestamp / 1000, UTC),
                    catalog=self.catalog,
                    settings=self.settings,
                    now=now,
                ),
            )
            for record in records
        ]
        sends = [self._send(record, outcome) for record, outcome in outcomes]
        # All acks before FastStream commits the poll; a failure raises and nacks it.
        await asyncio.gather(*sends)

    async def _send(self, record: ConsumerRecord[bytes, bytes], outcome: Outcome) -> None:
        producer = self.broker._producer  # noqa: SLF001 - FastStream exposes no public raw send
        if isinstance(outcome, Route):
            future = await self._raw_send(outcome.topic, outcome.key, outcome.value, outcome.headers)
            metadata = await future
            self.depths.observe_ack(metadata.topic, metadata.partition, metadata.offset)
            self.counts["routed"] += 1
        elif isinstance(outcome, Answer):
            value = outcome.result.model_dump_json(exclude_none=True).encode()
            headers = [
                (h.CONTENT_TYPE, h.JSON),
                (h.SCHEMA, h.RESULT_SCHEMA_V1),
                *[(k, v) for k, v in record.headers or () if k in (h.TRACEPARENT, h.TRACESTATE)],
            ]
            await (await self._raw_send(outcome.topic, outcome.key, value, headers))
            self.counts[outcome.result.status] += 1
            log.info(
                "event=request_rejected request_id=%s status=%s reason=%r",
                outcome.result.request_id,
                outcome.result.status,
                outcome.error.message[:200],
            )
        elif isinstance(outcome, DeadLetter):
            headers = dead_letter_headers(
                outcome.error, topic=record.topic, partition=record.partition, offset=record.offset
            )
            await (await self._raw_send(DLQ, record.key, outcome.value, headers))
            self.counts["dead_lettered"] += 1
            log.info(
                "event=dead_lettered partition=%d offset=%d reason=%r",
                record.partition,
                record.offset,
                outcome.error.message[:200],
            )
        del producer

    async def _raw_send(
        self, topic: str, key: bytes | None, value: bytes, headers: list[tuple[str, bytes]]
    ) -> asyncio.Future[Any]:
        return await self.broker.publish(  # type: ignore[no-any-return]
            value,
            topic,
            key=key,
            headers={k: v.decode("utf-8", "replace") for k, v in headers},
            no_confirm=True,
        )


async def run_ingest(bootstrap: str, settings: IngestSettings | None = None) -> None:
    """Run ingest until cancelled or signalled."""
    service = IngestService(bootstrap, settings)
    await service.app().run()

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
from aiokafka.errors import KafkaError
from aiokafka.structs import RecordMetadata
from faststream import AckPolicy, FastStream
from faststream.kafka.annotations import KafkaMessage
from opentelemetry import trace
from opentelemetry.trace import Span

from infra.kafka import FETCH_MAX_WAIT_MS, make_broker, make_producer, start_with_retry
from schemas import headers as h
from schemas.errors import EngineError
from schemas.result import error_result
from schemas.topics import DLQ, INGEST, INGEST_GROUP
from services.ingest.catalog import CachedModelCatalog, QueueDepths
from services.ingest.handlers import (
    Answer,
    DeadLetter,
    Outcome,
    Route,
    dead_letter_headers,
    handle_event,
)
from services.ingest.settings import IngestSettings
from services.models.repository import ModelRepository
from tracing.attributes import RequestAttrs
from tracing.kafka import (
    extract,
    inject,
    record_error,
    set_delivery,
    start_process_span,
    start_send_span,
)
from tracing.metrics import count_request, start_metrics_server
from tracing.setup import init_tracing, shutdown_tracing
from tracing.telemetry import TelemetryPublisher

log = logging.getLogger(__name__)


class IngestService:
    """Validates and routes request events; one instance per process."""

    def __init__(self, bootstrap: str, settings: IngestSettings | None = None) -> None:
        self.settings = settings or IngestSettings()
        self.bootstrap = bootstrap
        self.instance_id = (
            self.settings.instance_id or f"ingest-{socket.gethostname()}-{os.getpid()}"
        )
        self.depths = QueueDepths(bootstrap, refresh_ms=self.settings.queue_refresh_ms)
        repository = ModelRepository(self.settings.models_dir)
        self.depths.watch_models(repository.names())
        self.catalog = CachedModelCatalog(
            repository, refresh_s=self.settings.model_refresh_s, depths=self.depths
        )
        self.counts: Counter[str] = Counter()
        self.broker = make_broker(bootstrap, client_id=self.instance_id)
        self.producer = make_producer(bootstrap, client_id=self.instance_id)
        self.ready = asyncio.Event()
        self.telemetry = TelemetryPublisher(
            self._send_telemetry, instance_id=self.instance_id, service="inferbus-ingest"
        )
        self.broker.subscriber(
            INGEST,
            group_id=INGEST_GROUP,
            batch=True,
            max_records=self.settings.poll_max_records,
            batch_timeout_ms=self.settings.poll_timeout_ms,
            fetch_max_wait_ms=FETCH_MAX_WAIT_MS,
            auto_offset_reset="earliest",
            ack_policy=AckPolicy.NACK_ON_ERROR,
        )(self._on_batch)

    def app(self) -> FastStream:
        """The FastStream application (used by `inferbus ingest`)."""
        application = FastStream(self.broker, logger=log)
        application.on_startup(self._startup)
        application.after_startup(self._after_startup)
        application.on_shutdown(self._shutdown)
        return application

    async def _startup(self) -> None:
        await start_with_retry(self.producer.start, what="ingest-producer")
        await self.depths.start()
        self.telemetry.start()

    async def _shutdown(self) -> None:
        await self.telemetry.stop()
        await self.depths.stop()
        await self.producer.stop()

    async def _send_telemetry(self, topic: str, key: bytes, value: bytes) -> None:
        await (await self._raw_send(topic, key, value, []))

    async def _after_startup(self) -> None:
        self.ready.set()
        log.info("event=ingest_ready instance=%s bootstrap=%s", self.instance_id, self.bootstrap)

    async def _on_batch(self, body: list[Any], message: KafkaMessage) -> None:
        records: Sequence[ConsumerRecord[bytes, bytes]] = message.raw_message
        now = datetime.now(UTC)
        sends = []
        for record in records:
            # Open until its outcome is acked (ended in _send): the ingest stage covers the
            # route to the tier topic, and model/tier are set on it before it ends.
            span = start_process_span(
                INGEST,
                group=INGEST_GROUP,
                partition=record.partition,
                offset=record.offset,
                key=record.key,
                context=extract(record.headers),
                stage="ingest",
            )
            outcome = handle_event(
                record.value,
                produced_at=datetime.fromtimestamp(record.timestamp / 1000, UTC),
                catalog=self.catalog,
                settings=self.settings,
                now=now,
            )
            if isinstance(outcome, Route):
                # Counted at once, so this poll's later requests see it before its ack.
                self.depths.reserve(outcome.topic)
            sends.append(self._send(record, outcome, span))
        # All acks before FastStream commits the poll; a failure raises and nacks it.
        await asyncio.gather(*sends)

    async def _send(
        self, record: ConsumerRecord[bytes, bytes], outcome: Outcome, span: Span
    ) -> None:
        try:
            await self._send_outcome(record, outcome, span)
        except KafkaError as exc:
            # aiokafka has already retried for its request timeout. A send that still fails
            # (a reply topic that does not exist, a tier topic never provisioned) must not
            # nack the poll forever and stall ingest for everyone: answer or dead-letter it.
            record_error(span, exc)
            await self._undeliverable(record, outcome, exc, span)
        except Exception as exc:
            record_error(span, exc)
            raise
        finally:
            span.end()

    async def _undeliverable(
        self, record: ConsumerRecord[bytes, bytes], outcome: Outcome, exc: KafkaError, span: Span
    ) -> None:
        """A routed request gets `internal_error`; what still cannot be sent goes to the DLQ.

        Only a DLQ send that fails raises (the broker itself is down): the poll is then
        retried, which is right.
        """
        where = outcome.topic if isinstance(outcome, Route | Answer) else DLQ
        reason = f"could not produce to {where}: {type(exc).__name__}: {exc}"
        log.error(
            "event=undeliverable partition=%d offset=%d reason=%r",
            record.partition,
            record.offset,
            reason,
        )
        if isinstance(outcome, Route):
            request = outcome.request
            failure = EngineError(f"ingest could not route the request: {reason}")
            answer = Answer(
                request.reply_to,
                outcome.key,
                error_result(
                    request.request_id,
                    request.model,
                    failure.status,
                    str(failure),
                    tenant=request.tenant,
                    completed_at=datetime.now(UTC),
                ),
                failure,
                tier=request.tier,
            )
            try:
                await self._send_outcome(record, answer, span)
                return
            except KafkaError as again:
                reason = f"{reason}; and the error result to {request.reply_to}: {again!r}"
        headers = h.dead_letter(
            reason, topic=record.topic, partition=record.partition, offset=record.offset
        )
        headers[0] = (h.ERROR_CODE, b"undeliverable")
        await (await self._raw_send(DLQ, record.key, record.value or b"", headers))
        self.counts["dead_lettered"] += 1

    async def _send_outcome(
        self, record: ConsumerRecord[bytes, bytes], outcome: Outcome, span: Span
    ) -> None:
        if isinstance(outcome, Route):
            request = outcome.request
            attrs = RequestAttrs(
                model=request.model, tier=request.tier, request_id=request.request_id
            )
            span.set_attributes(attrs.as_attributes())
            send = start_send_span(outcome.topic, key=outcome.key, request=attrs, parent=span)
            headers = inject(list(outcome.headers), trace.set_span_in_context(send))
            try:
                metadata = await (
                    await self._raw_send(outcome.topic, outcome.key, outcome.value, headers)
                )
                set_delivery(send, partition=metadata.partition, offset=metadata.offset)
            except BaseException:
                self.depths.release(outcome.topic)
                raise
            finally:
                send.end()
            self.depths.observe_ack(metadata.topic, metadata.partition, metadata.offset)
            self.counts["routed"] += 1
        elif isinstance(outcome, Answer):
            result = outcome.result
            record_error(span, result.status)
            value = result.model_dump_json(exclude_none=True).encode()
            headers = inject(
                [(h.CONTENT_TYPE, h.JSON), (h.SCHEMA, h.RESULT_SCHEMA_V1)],
                trace.set_span_in_context(span),
            )
            await (await self._raw_send(outcome.topic, outcome.key, value, headers))
            self.counts[result.status] += 1
            count_request(
                "inferbus-ingest",
                result.model,
                outcome.tier,
                result.status,
            )
            log.info(
                "event=request_rejected request_id=%s status=%s reason=%r",
                result.request_id,
                result.status,
                outcome.error.message[:200],
            )
        elif isinstance(outcome, DeadLetter):
            record_error(span, "unparseable")
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

    async def _raw_send(
        self, topic: str, key: bytes | None, value: bytes, headers: list[tuple[str, bytes]]
    ) -> asyncio.Future[RecordMetadata]:
        # aiokafka directly: FastStream's publish adds per-message middleware cost and
        # headers of its own that results do not need.
        future: asyncio.Future[RecordMetadata] = await self.producer.send(
            topic, value, key=key, headers=headers
        )
        return future


async def run_ingest(bootstrap: str, settings: IngestSettings | None = None) -> None:
    """Run ingest until cancelled or signalled."""
    service = IngestService(bootstrap, settings)
    init_tracing("inferbus-ingest", instance_id=service.instance_id)
    start_metrics_server(service.settings.metrics_port)
    try:
        await service.app().run()
    finally:
        shutdown_tracing()

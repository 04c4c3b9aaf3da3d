"""Terminal results as bytes, in the form the request came in, and publishing them in bulk.

Ingest's error answers and the worker's results are the same events with the same headers:
one encoder, one publisher. Encoding writes the `InferenceResult` JSON directly (orjson),
the same document `InferenceResult.model_dump_json(exclude_none=True)` gives; a test holds
them equal.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import orjson
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError
from aiokafka.structs import RecordMetadata

from schemas import headers as h
from schemas.frames import CONTENT_TYPE as FRAME_CONTENT_TYPE
from schemas.frames import join_frame
from schemas.result import Status
from schemas.tensors import dtype_name

log = logging.getLogger(__name__)

OutputForm = Literal["frame", "b64", "list"]
"""How outputs travel: the request's form (frame in, frame out; b64 in, b64 out)."""
Headers = list[tuple[str, bytes]]

JSON_HEADERS: Headers = [(h.CONTENT_TYPE, h.JSON), (h.SCHEMA, h.RESULT_SCHEMA_V1)]
FRAME_HEADERS: Headers = [(h.CONTENT_TYPE, FRAME_CONTENT_TYPE), (h.SCHEMA, h.RESULT_SCHEMA_V1)]


@dataclass(slots=True)
class Outgoing:
    """One record to produce."""

    topic: str
    key: bytes | None
    value: bytes
    headers: Headers


def encode_result(
    *,
    request_id: str,
    model: str,
    status: Status,
    form: OutputForm = "list",
    outputs: Mapping[str, np.ndarray[Any, Any]] | None = None,
    error: str | None = None,
    model_version: str | None = None,
    timings: Mapping[str, float | None] | None = None,
    batch_size: int | None = None,
    worker_id: str | None = None,
    provider: str | None = None,
    simulated: bool = False,
    tenant: str | None = None,
    completed_at: str | None = None,
) -> bytes:
    """An `InferenceResult` as its wire bytes (a binary frame when `form` is frame)."""
    document: dict[str, Any] = {"schema_version": 1, "request_id": request_id, "model": model}
    if model_version is not None:
        document["model_version"] = model_version
    document["status"] = status
    if error is not None:
        document["error"] = {"code": status, "message": error}
    payload: list[bytes] = []
    document["outputs"] = _outputs(outputs or {}, form, payload)
    document["timings"] = {k: v for k, v in (timings or {}).items() if v is not None}
    for key, value in (
        ("batch_size", batch_size),
        ("worker_id", worker_id),
        ("provider", provider),
    ):
        if value is not None:
            document[key] = value
    document["simulated"] = simulated
    if tenant is not None:
        document["tenant"] = tenant
    if completed_at is not None:
        document["completed_at"] = completed_at
    envelope = orjson.dumps(document)
    return join_frame(envelope, payload) if form == "frame" else envelope


def _outputs(
    outputs: Mapping[str, np.ndarray[Any, Any]], form: OutputForm, payload: list[bytes]
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    offset = 0
    for name, array in outputs.items():
        wire_dtype = dtype_name(array.dtype)
        tensor: dict[str, Any] = {"dtype": wire_dtype, "shape": list(array.shape)}
        if form == "list":
            tensor["data"] = array.tolist()
        else:
            raw = np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<")).tobytes()
            if form == "b64":
                tensor["b64"] = base64.b64encode(raw).decode()
            else:
                tensor["raw"] = {"offset": offset, "nbytes": len(raw)}
                payload.append(raw)
                offset += len(raw)
        out[name] = tensor
    return out


def result_headers(form: OutputForm) -> Headers:
    """A fresh copy of a result's headers (trace context may be added to it)."""
    return list(FRAME_HEADERS if form == "frame" else JSON_HEADERS)


class UnknownTopic(KafkaError):  # type: ignore[misc]
    """A record's topic does not exist (or the broker cannot be reached to say)."""


class Publisher:
    """Produces many records without awaiting each, then every ack; retries what failed."""

    def __init__(
        self, producer: AIOKafkaProducer, *, attempts: int = 4, metadata_timeout_s: float = 5.0
    ) -> None:
        self.producer = producer
        self.attempts = attempts
        self.metadata_timeout_s = metadata_timeout_s

    async def _unknown_topics(self, topics: set[str]) -> dict[str, BaseException]:
        """Topics the producer cannot find, each checked once: aiokafka would otherwise
        wait its whole request timeout for every record bound to a missing topic."""
        missing: dict[str, BaseException] = {}
        cluster = self.producer.client.cluster
        for topic in topics:
            if cluster.partitions_for_topic(topic):
                continue
            try:
                await asyncio.wait_for(self.producer.partitions_for(topic), self.metadata_timeout_s)
            except (KafkaError, TimeoutError) as exc:
                missing[topic] = UnknownTopic(
                    f"topic {topic!r} is not known to the broker: {exc!r}"
                )
        return missing

    async def send_all(self, records: Sequence[Outgoing]) -> list[RecordMetadata | BaseException]:
        """Per record, in order: its ack, or the error that outlived every attempt."""
        outcomes: list[RecordMetadata | BaseException] = [KafkaError("not sent") for _ in records]
        pending = list(range(len(records)))
        for attempt in range(1, self.attempts + 1):
            futures = []
            missing = await self._unknown_topics({records[i].topic for i in pending})
            for index in pending:
                record = records[index]
                if record.topic in missing:
                    futures.append(_failed(missing[record.topic]))
                    continue
                try:
                    futures.append(
                        await self.producer.send(
                            record.topic, record.value, key=record.key, headers=record.headers
                        )
                    )
                except KafkaError as exc:  # e.g. a message too large: fails before queuing
                    futures.append(_failed(exc))
            results = await asyncio.gather(*futures, return_exceptions=True)
            failed = []
            for index, result in zip(pending, results, strict=True):
                outcomes[index] = result
                if isinstance(result, BaseException):
                    failed.append(index)
            if not failed:
                break
            pending = failed
            if attempt < self.attempts:
                delay = 0.2 * 2**attempt
                log.warning(
                    "event=publish_retry attempt=%d failed=%d delay_s=%.1f error=%r",
                    attempt,
                    len(failed),
                    delay,
                    outcomes[failed[0]],
                )
                await asyncio.sleep(delay)
        return outcomes


def _failed(exc: BaseException) -> asyncio.Future[Any]:
    future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    future.set_exception(exc)
    return future

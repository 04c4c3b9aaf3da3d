"""Helpers for integration tests: derived model repos, raw producers, result collection."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import onnx
from aiokafka import AIOKafkaConsumer, TopicPartition

from infra.kafka import make_consumer
from infra.models.config import ModelConfig
from infra.topics import ensure_topics, standard_topics
from schemas.frames import is_frame, split_frame
from services.ingest.app import IngestService
from services.ingest.settings import IngestSettings
from services.models.demo import build_mlp
from services.worker.app import Worker
from services.worker.settings import WorkerSettings


def derive_model(root: Path, source: str, name: str, **changes: Any) -> Path:
    """Copy a model under a new name, with top-level config fields changed."""
    target = root / name
    shutil.copytree(root / source, target)
    data = ModelConfig.load(root / source / "model.yaml").model_dump()
    data.update({"name": name, **changes})
    ModelConfig.model_validate(data).dump(target / "model.yaml")
    return target


def add_mlp_version(root: Path, name: str, version: str, seed: int) -> Path:
    """Write another version of an MLP model atomically (temp folder, then rename)."""
    staging = root / name / f".{version}.tmp"
    staging.mkdir(parents=True)
    onnx.save(build_mlp(seed), str(staging / "model.onnx"))
    final = root / name / version
    staging.rename(final)
    return final / "model.onnx"


async def reply_consumer(bootstrap: str, topic: str) -> AIOKafkaConsumer:
    """A group-less consumer positioned at the end of `topic`."""
    consumer = make_consumer(bootstrap=bootstrap, group_id=None, client_id="test-reader")
    await consumer.start()
    await consumer.topics()
    partitions = consumer.partitions_for_topic(topic) or set()
    tps = [TopicPartition(topic, p) for p in sorted(partitions)]
    consumer.assign(tps)
    await consumer.seek_to_end(*tps)
    for tp in tps:
        await consumer.position(tp)
    return consumer


def json_or_frame(value: bytes) -> Any:
    """A record's JSON, or a binary frame's JSON envelope (results to frame requests)."""
    if is_frame(value):
        envelope, _ = split_frame(value)
        return json.loads(bytes(envelope))
    return json.loads(value)


async def collect(
    consumer: AIOKafkaConsumer,
    wanted: Iterable[str],
    *,
    key: Callable[[Any], str | None],
    timeout_s: float = 60.0,
    parse: Callable[[bytes], Any] | None = None,
    seen: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Read until every wanted key was seen (first one wins); raises TimeoutError naming the rest.

    `seen` keeps every keyed record read, wanted or not, so a later call can want records
    an earlier one already read past.
    """
    found: dict[str, Any] = seen if seen is not None else {}
    missing = set(wanted) - set(found)

    async def loop() -> None:
        while missing:
            batches = await consumer.getmany(timeout_ms=200)
            for records in batches.values():
                for record in records:
                    value = record.value
                    item = None if value is None else (parse or json_or_frame)(value)
                    k = key((record, item))
                    if k is not None and k not in found:
                        found[k] = (record, item)
                        missing.discard(k)

    try:
        await asyncio.wait_for(loop(), timeout_s)
    except TimeoutError:
        raise TimeoutError(f"{len(missing)} never arrived, e.g. {sorted(missing)[:5]}") from None
    return {k: found[k] for k in wanted}


@contextlib.asynccontextmanager
async def serving(
    broker: str, models: Path, workers: Sequence[WorkerSettings]
) -> AsyncIterator[None]:
    """Ingest and one worker per settings on `models` (their topics made), in this process;
    stopped on the way out."""
    await ensure_topics(broker, standard_topics(sorted({w.model for w in workers})))
    ingest = IngestService(broker, IngestSettings(models_dir=models))
    running = [Worker(broker, settings) for settings in workers]
    await ingest.start()
    try:
        await asyncio.gather(*(worker.start() for worker in running))
        await asyncio.wait_for(ingest.ready.wait(), 60)
        yield
    finally:
        await asyncio.gather(*(worker.stop() for worker in running), ingest.stop())

"""Helpers for integration tests: derived model repos, raw producers, result collection."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import onnx
from aiokafka import AIOKafkaConsumer, TopicPartition

from infra.kafka import make_consumer
from infra.models.config import ModelConfig
from schemas.frames import is_frame, split_frame
from services.models.demo import build_mlp


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

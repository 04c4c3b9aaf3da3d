"""`scan_log` reads a topic from its start and says where each id is, by key or by any
identity read from the record, and which offsets held two records."""

from __future__ import annotations

import uuid

import pytest
from aiokafka import ConsumerRecord

from infra.kafka import make_producer
from infra.scan import scan_log
from infra.topics import TopicSpec, ensure_topics

pytestmark = pytest.mark.integration


def value_text(record: ConsumerRecord[bytes, bytes]) -> str | None:
    return record.value.decode() if record.value else None


@pytest.mark.parametrize(
    ("ident", "wanted", "found"),
    [
        pytest.param(None, {"k0", "k2", "absent"}, {"k0": 1, "k2": 1, "absent": 0}, id="by-key"),
        pytest.param(value_text, {"v1", "nope"}, {"v1": 1, "nope": 0}, id="by-value"),
    ],
)
async def test_scan_log(
    broker: str, ident: object, wanted: set[str], found: dict[str, int]
) -> None:
    topic = f"scan-{uuid.uuid4().hex[:8]}"
    await ensure_topics(broker, [TopicSpec(topic, 2)])
    producer = make_producer(bootstrap=broker, client_id="scan-test")
    await producer.start()
    try:
        for i in range(3):
            await producer.send_and_wait(topic, f"v{i}".encode(), key=f"k{i}".encode())
    finally:
        await producer.stop()
    kwargs = {} if ident is None else {"ident": ident}
    scan = await scan_log(broker, topic, wanted, quiet_s=0.5, **kwargs)  # type: ignore[arg-type]
    assert {i: len(at) for i, at in scan.found.items()} == found
    assert scan.shared == frozenset(), "a healthy log holds one record per offset"

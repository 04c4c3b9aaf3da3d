"""Mutual TLS for real: Tansu behind a TLS proxy that requires a client certificate.

The broker advertises the proxy's address, so every connection of every client (bootstrap,
partition leaders, the group coordinator) goes through TLS.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.admin import NewTopic

from infra.broker import EmbeddedBroker
from infra.kafka import make_admin, make_broker, make_consumer, make_producer
from infra.security import KafkaSecurityError, KafkaSecuritySettings, process_security
from infra.topics import TopicSpec, ensure_topics, partition_count
from scaler.collector.offsets import GroupOffsetReader
from scaler.registry import Registry
from schemas.telemetry import InstanceRecord
from services.client import InferenceClient
from tests.integration.tls_proxy import TlsProxy, server_context
from tests.pki import KEY_PASSWORD, Pki, make_pki

pytestmark = pytest.mark.integration


@dataclass(frozen=True)
class TlsBroker:
    """The proxy's address (what clients use), the proxy itself and the PKI."""

    bootstrap: str
    proxy: TlsProxy
    pki: Pki


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsBroker]:
    pki = make_pki(tmp_path_factory.mktemp("pki"))
    proxy = TlsProxy(server_context(pki.server_cert, pki.server_key, client_ca=pki.ca))
    address = proxy.start()
    try:
        with EmbeddedBroker(port=0, advertised=address) as broker:
            assert broker.port is not None
            proxy.upstream = ("127.0.0.1", broker.port)
            yield TlsBroker(address, proxy, pki)
    finally:
        proxy.stop()


def tls(pki: Pki, **changes: Any) -> KafkaSecuritySettings:
    """Mutual-TLS settings with the good client certificate, with `changes` applied."""
    fields: dict[str, Any] = {
        "security_protocol": "SSL",
        "ssl_cafile": pki.ca,
        "ssl_certfile": pki.client_cert,
        "ssl_keyfile": pki.client_key,
    }
    fields.update(changes)
    return KafkaSecuritySettings(**fields)


async def read_one(bootstrap: str, topic: str, security: KafkaSecuritySettings) -> bytes:
    consumer = make_consumer(bootstrap=bootstrap, group_id=None, security=security)
    await consumer.start()
    try:
        partition = TopicPartition(topic, 0)
        consumer.assign([partition])
        await consumer.seek_to_beginning(partition)
        record = await asyncio.wait_for(consumer.getone(), timeout=30)
        return bytes(record.value)
    finally:
        await consumer.stop()


async def create_topic(bootstrap: str, security: KafkaSecuritySettings) -> str:
    topic = f"t-{uuid.uuid4()}"
    admin = make_admin(bootstrap, security=security)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 1, 1)])
        assert topic in await admin.list_topics()
    finally:
        await admin.close()
    return topic


@pytest.mark.parametrize(
    "key",
    [pytest.param("plain", id="plain-key"), pytest.param("encrypted", id="encrypted-key")],
)
async def test_record_round_trips_with_a_client_certificate(
    tls_broker: TlsBroker, key: str
) -> None:
    pki = tls_broker.pki
    security = (
        tls(pki)
        if key == "plain"
        else tls(pki, ssl_keyfile=pki.client_key_encrypted, ssl_password=KEY_PASSWORD)
    )
    accepted_before = tls_broker.proxy.accepted
    topic = await create_topic(tls_broker.bootstrap, security)
    producer = make_producer(tls_broker.bootstrap, security=security)
    await producer.start()
    try:
        await producer.send_and_wait(topic, b"over mutual TLS", partition=0)
    finally:
        await producer.stop()
    assert await read_one(tls_broker.bootstrap, topic, security) == b"over mutual TLS"
    assert tls_broker.proxy.accepted > accepted_before


async def test_faststream_broker_publishes_over_mutual_tls(tls_broker: TlsBroker) -> None:
    security = tls(tls_broker.pki)
    topic = await create_topic(tls_broker.bootstrap, security)
    broker = make_broker(tls_broker.bootstrap, client_id="test-faststream", security=security)
    await broker.start()
    try:
        await broker.publish(b"from faststream", topic=topic, partition=0)
    finally:
        await broker.stop()
    assert await read_one(tls_broker.bootstrap, topic, security) == b"from faststream"


def _client(kind: str, bootstrap: str, security: KafkaSecuritySettings) -> Any:
    if kind == "producer":
        return make_producer(bootstrap, security=security)
    if kind == "consumer":
        return make_consumer(bootstrap=bootstrap, group_id=None, security=security)
    return make_admin(bootstrap, security=security)


async def _refusal(kind: str, bootstrap: str, security: KafkaSecuritySettings) -> str:
    client = _client(kind, bootstrap, security)
    try:
        with pytest.raises(KafkaSecurityError) as refused:
            await client.start()
    finally:
        await (client.close() if kind == "admin" else client.stop())
    return str(refused.value)


@pytest.mark.parametrize("kind", ["producer", "consumer", "admin"])
async def test_client_without_certificate_is_refused(tls_broker: TlsBroker, kind: str) -> None:
    refused_before = tls_broker.proxy.refused
    security = tls(tls_broker.pki, ssl_certfile=None, ssl_keyfile=None)
    message = await _refusal(kind, tls_broker.bootstrap, security)
    assert "requires a client certificate" in message
    assert "INFERBUS_KAFKA_SSL_CERTFILE" in message
    assert "INFERBUS_KAFKA_SSL_KEYFILE" in message
    assert tls_broker.proxy.refused > refused_before


async def test_certificate_from_an_untrusted_ca_is_refused(tls_broker: TlsBroker) -> None:
    pki = tls_broker.pki
    security = tls(pki, ssl_certfile=pki.rogue_client_cert, ssl_keyfile=pki.rogue_client_key)
    message = await _refusal("producer", tls_broker.bootstrap, security)
    assert "did not accept the client certificate" in message
    assert f"INFERBUS_KAFKA_SSL_CERTFILE={pki.rogue_client_cert}" in message


async def test_broker_certificate_from_another_ca_is_refused(tls_broker: TlsBroker) -> None:
    security = tls(tls_broker.pki, ssl_cafile=tls_broker.pki.rogue_ca)
    message = await _refusal("producer", tls_broker.bootstrap, security)
    assert "the broker's TLS certificate did not verify" in message
    assert "INFERBUS_KAFKA_SSL_CAFILE" in message


async def test_plaintext_client_on_a_tls_listener_is_told_to_use_tls(tls_broker: TlsBroker) -> None:
    message = await _refusal("producer", tls_broker.bootstrap, KafkaSecuritySettings())
    assert "speaks TLS" in message
    assert "INFERBUS_KAFKA_SECURITY_PROTOCOL=PLAINTEXT" in message


async def test_tls_client_on_a_plain_listener_is_told_it_is_not_tls(
    broker: str, tmp_path: Path
) -> None:
    pki = make_pki(tmp_path)
    client = make_producer(broker, security=tls(pki), request_timeout_ms=2_000)
    try:
        with pytest.raises(KafkaSecurityError) as refused:
            await client.start()
    finally:
        await client.stop()
    assert "no TLS answer" in str(refused.value)
    assert "INFERBUS_KAFKA_SECURITY_PROTOCOL=SSL" in str(refused.value)


@pytest.fixture
def tls_environment(tls_broker: TlsBroker, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The process's INFERBUS_KAFKA_* settings say mutual TLS (read afresh, then forgotten)."""
    pki = tls_broker.pki
    monkeypatch.setenv("INFERBUS_KAFKA_SECURITY_PROTOCOL", "SSL")
    monkeypatch.setenv("INFERBUS_KAFKA_SSL_CAFILE", str(pki.ca))
    monkeypatch.setenv("INFERBUS_KAFKA_SSL_CERTFILE", str(pki.client_cert))
    monkeypatch.setenv("INFERBUS_KAFKA_SSL_KEYFILE", str(pki.client_key))
    process_security.cache_clear()
    yield
    process_security.cache_clear()


@pytest.mark.usefixtures("tls_environment")
async def test_project_clients_use_the_environment_settings(tls_broker: TlsBroker) -> None:
    """Topics admin, scaler registry and offsets reader, client library: all over mutual TLS."""
    bootstrap, suffix = tls_broker.bootstrap, uuid.uuid4().hex[:8]
    instances, requests, replies = f"t-inst-{suffix}", f"t-req-{suffix}", f"t-res-{suffix}"
    refused_before = tls_broker.proxy.refused
    specs = [TopicSpec(instances, 1), TopicSpec(requests, 2), TopicSpec(replies, 1)]
    assert sorted(await ensure_topics(bootstrap, specs)) == sorted([instances, requests, replies])
    assert await partition_count(bootstrap, requests) == 2

    now = datetime.now(UTC)
    record = InstanceRecord(
        instance_id="w-1", model="m", tiers=["batch"], group="inferbus.workers.m.batch",
        state="ready", started_at=now, updated_at=now,
    )  # fmt: skip
    producer = make_producer(bootstrap)
    await producer.start()
    try:
        await producer.send_and_wait(instances, record.model_dump_json().encode(), key=b"w-1")
        for _ in range(3):
            await producer.send_and_wait(requests, b"{}", partition=0)
    finally:
        await producer.stop()

    registry = Registry(bootstrap, topic=instances)
    await registry.start()
    try:
        await asyncio.wait_for(registry.caught_up.wait(), timeout=30)
        assert registry.view()["w-1"].state == "ready"
    finally:
        await registry.close()

    reader = GroupOffsetReader(bootstrap, f"g-{suffix}", requests)
    await reader.start()
    try:
        answer = await reader.read()
    finally:
        await reader.close()
    assert {o.partition: o.end for o in answer.offsets} == {0: 3, 1: 0}

    async with InferenceClient(bootstrap, reply_to=replies) as client:
        assert client.bootstrap == bootstrap
    assert tls_broker.proxy.refused == refused_before


async def test_tls_client_on_a_plain_listener_hears_why_before_the_request_timeout(
    broker: str, tmp_path: Path
) -> None:
    """With the default 40 s request timeout, aiokafka's start waited it out before the
    probe said why (47 s in all); a start still waiting after 5 s asks now."""
    client = make_producer(broker, security=tls(make_pki(tmp_path)))
    began = time.monotonic()
    try:
        with pytest.raises(KafkaSecurityError) as refused:
            await client.start()
    finally:
        await client.stop()
    assert time.monotonic() - began < 20
    assert "answers plain-text Kafka" in str(refused.value)
    assert "INFERBUS_KAFKA_SECURITY_PROTOCOL=SSL expects TLS: set it to PLAINTEXT" in str(
        refused.value
    )

"""SASL for real, against Tansu with `--authentication` (SCRAM-SHA-256/512 only).

Tansu 0.6 keeps SCRAM users in its storage and creates them only through an
authenticated connection, so a memory-storage broker with authentication on can never
hold a user: every login is refused. That is the case tested here (a password the broker
does not accept); a successful SASL login needs Apache Kafka (see docs/security.md).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from infra.broker import EmbeddedBroker
from infra.kafka import make_producer
from infra.security import KafkaSecurityError, KafkaSecuritySettings

pytestmark = pytest.mark.integration

PASSWORD = "not-the-pa55word-of-alice"


@pytest.fixture(scope="module")
def sasl_broker() -> Iterator[str]:
    with EmbeddedBroker(port=0, authentication=True) as broker:
        yield broker.bootstrap


async def _refusal(bootstrap: str, **fields: Any) -> KafkaSecurityError:
    producer = make_producer(bootstrap, security=KafkaSecuritySettings(**fields))
    try:
        with pytest.raises(KafkaSecurityError) as refused:
            await producer.start()
    finally:
        await producer.stop()
    return refused.value


def _chain(error: BaseException) -> str:
    """Every message and repr along the exception chain."""
    parts: list[str] = []
    current: BaseException | None = error
    while current is not None:
        parts += [str(current), repr(current)]
        current = current.__cause__ or current.__context__
    return "\n".join(parts)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
async def test_a_password_the_broker_does_not_accept_is_refused(
    sasl_broker: str, mechanism: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    error = await _refusal(
        sasl_broker,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism=mechanism,
        sasl_username="alice",
        sasl_password=PASSWORD,
    )
    message = str(error)
    assert "refused the SASL login of INFERBUS_KAFKA_SASL_USERNAME=alice" in message
    assert f"INFERBUS_KAFKA_SASL_MECHANISM={mechanism}" in message
    assert "check INFERBUS_KAFKA_SASL_PASSWORD" in message
    assert PASSWORD not in _chain(error)
    assert PASSWORD not in caplog.text


async def test_a_mechanism_the_broker_does_not_enable_is_named(sasl_broker: str) -> None:
    # Tansu closes the connection instead of listing its mechanisms (Apache Kafka lists
    # them: that branch is unit-tested), so the message names the mechanism as a suspect.
    error = await _refusal(
        sasl_broker,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_username="alice",
        sasl_password=PASSWORD,
    )
    assert "with INFERBUS_KAFKA_SASL_MECHANISM=PLAIN" in str(error)
    assert "that the broker enables it" in str(error)
    assert PASSWORD not in _chain(error)


async def test_a_client_without_sasl_is_told_the_listener_requires_it(sasl_broker: str) -> None:
    error = await _refusal(sasl_broker)
    assert "may require SASL" in str(error)
    assert "INFERBUS_KAFKA_SECURITY_PROTOCOL=PLAINTEXT" in str(error)

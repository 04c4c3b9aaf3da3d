"""The refusal probe's verdicts that need no broker: nothing listening, and its pure branches."""

from __future__ import annotations

import ssl

import pytest
from aiokafka.errors import KafkaConnectionError, UnsupportedSaslMechanismError

from infra.broker import free_port
from infra.security import KafkaSecurity, KafkaSecuritySettings
from infra.security_probe import _sasl_refusal, _transport_refusal, explain_refusal
from tests.pki import Pki

SCRAM = KafkaSecuritySettings(
    security_protocol="SASL_PLAINTEXT",
    sasl_mechanism="SCRAM-SHA-256",
    sasl_username="alice",
    sasl_password="pw-that-must-not-show",
)


async def test_a_broker_that_is_not_up_is_not_a_security_problem() -> None:
    port = free_port()
    assert await explain_refusal(f"127.0.0.1:{port}", KafkaSecurity.of(SCRAM)) is None


def _verification_error(message: str) -> ssl.SSLCertVerificationError:
    error = ssl.SSLCertVerificationError(1, f"certificate verify failed: {message}")
    error.verify_message = message
    return error


@pytest.mark.parametrize(
    ("failure", "expected"),
    [
        pytest.param(
            _verification_error("Hostname mismatch, certificate is not valid for 'kafka-0'."),
            "connect by a name the certificate holds (or INFERBUS_KAFKA_SSL_CHECK_HOSTNAME=false)",
            id="hostname-mismatch",
        ),
        pytest.param(
            _verification_error("unable to get local issuer certificate"),
            "set INFERBUS_KAFKA_SSL_CAFILE to the CA that signed it",
            id="unknown-issuer",
        ),
    ],
)
def test_an_unverified_broker_certificate_names_the_setting(
    failure: ssl.SSLCertVerificationError, expected: str
) -> None:
    security = KafkaSecurity.of(KafkaSecuritySettings(security_protocol="SSL"))
    refusal = _transport_refusal(failure, security, "b:9093", listener_tls=False)
    assert refusal is not None
    assert expected in str(refusal)
    assert "cafile=system CAs" in str(refusal)


def test_a_slow_plain_broker_is_not_blamed_on_security() -> None:
    security = KafkaSecurity.of(KafkaSecuritySettings())
    assert _transport_refusal(TimeoutError(), security, "b:9092", listener_tls=False) is None


@pytest.mark.parametrize(
    ("failure", "expected"),
    [
        pytest.param(
            UnsupportedSaslMechanismError(
                "Kafka broker does not support SCRAM-SHA-256 sasl mechanism. "
                "Enabled mechanisms are: ['PLAIN']"
            ),
            "the broker does not enable INFERBUS_KAFKA_SASL_MECHANISM=SCRAM-SHA-256",
            id="mechanism-not-enabled",
        ),
        pytest.param(
            UnsupportedSaslMechanismError(
                "Kafka broker does not support SCRAM-SHA-256 sasl mechanism. "
                "Enabled mechanisms are: []"
            ),
            "the broker offers no SASL mechanism: its listener does not use SASL: set "
            "INFERBUS_KAFKA_SECURITY_PROTOCOL=PLAINTEXT",
            id="a-listener-without-sasl",
        ),
        pytest.param(
            KeyError("v"),
            "answered the SCRAM exchange with an error instead of its signature",
            id="scram-error-answer",
        ),
        pytest.param(
            KafkaConnectionError("Connection at b:9092 closed"),
            "refused the SASL login of INFERBUS_KAFKA_SASL_USERNAME=alice",
            id="connection-closed",
        ),
    ],
)
def test_sasl_refusals_name_the_settings(failure: BaseException, expected: str) -> None:
    refusal = _sasl_refusal(failure, KafkaSecurity.of(SCRAM), "b:9092")
    assert expected in str(refusal)
    assert "pw-that-must-not-show" not in str(refusal)


@pytest.mark.parametrize(
    ("protocol", "certificate", "says_sasl"),
    [
        pytest.param("SSL", False, True, id="tls-no-certificate"),
        pytest.param("SSL", True, True, id="tls-with-certificate"),
        pytest.param("SASL_SSL", False, False, id="sasl-already"),
    ],
)
def test_a_tls_connection_closed_after_the_handshake_names_sasl_as_a_suspect(
    pki: Pki, protocol: str, certificate: bool, says_sasl: bool
) -> None:
    """A client set to SSL on a SASL_SSL listener was told only to fix its certificate."""
    files = {"ssl_certfile": pki.client_cert, "ssl_keyfile": pki.client_key} if certificate else {}
    sasl = (
        {"sasl_mechanism": "SCRAM-SHA-256", "sasl_username": "alice", "sasl_password": "pw"}
        if protocol == "SASL_SSL"
        else {}
    )
    settings = KafkaSecuritySettings(
        security_protocol=protocol,
        ssl_cafile=pki.ca,
        **files,
        **sasl,  # type: ignore[arg-type]
    )
    closed = KafkaConnectionError("Connection at b:9093 closed")
    refusal = _transport_refusal(closed, KafkaSecurity.of(settings), "b:9093", listener_tls=True)
    assert refusal is not None
    assert (
        "requires SASL over TLS: set INFERBUS_KAFKA_SECURITY_PROTOCOL=SASL_SSL" in str(refusal)
    ) is says_sasl

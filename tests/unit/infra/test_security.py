"""Kafka security settings: env → settings → aiokafka options; every refusal names its variable."""

from __future__ import annotations

import os
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from faststream.kafka.security import parse_security

from infra import security as sec
from infra.kafka import make_admin, make_consumer, make_producer
from infra.security import (
    KafkaSecurity,
    KafkaSecurityError,
    KafkaSecuritySettings,
    broker_security,
    client_options,
    known_variables,
    load_settings,
    problems,
    process_security,
    unknown_variables,
)
from tests.pki import KEY_PASSWORD, Pki

SECRET = "s3cret-Pa55word"


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """No INFERBUS_KAFKA_* security variable from the outside, and a fresh process cache."""
    for name in list(os.environ):
        if name.startswith("INFERBUS_KAFKA_") and name != "INFERBUS_KAFKA_BOOTSTRAP":
            monkeypatch.delenv(name)
    process_security.cache_clear()
    yield monkeypatch
    process_security.cache_clear()


def settings(pki: Pki, **fields: Any) -> KafkaSecuritySettings:
    """Settings where the strings "ca", "cert", "key", "key-enc" name the PKI's files."""
    files = {
        "ca": pki.ca,
        "cert": pki.client_cert,
        "key": pki.client_key,
        "key-enc": pki.client_key_encrypted,
    }
    resolved = {k: files.get(v, v) if isinstance(v, str) else v for k, v in fields.items()}
    return KafkaSecuritySettings(**resolved)


MAPPINGS = [
    pytest.param({}, {"security_protocol": "PLAINTEXT"}, id="plaintext-default"),
    pytest.param(
        {"security_protocol": "SSL", "ssl_cafile": "ca"},
        {"security_protocol": "SSL", "ssl_context": "verifies-hostname"},
        id="tls-server-auth",
    ),
    pytest.param(
        {"security_protocol": "SSL", "ssl_cafile": "ca", "ssl_check_hostname": False},
        {"security_protocol": "SSL", "ssl_context": "no-hostname-check"},
        id="tls-no-hostname-check",
    ),
    pytest.param(
        {
            "security_protocol": "SSL",
            "ssl_cafile": "ca",
            "ssl_certfile": "cert",
            "ssl_keyfile": "key",
        },
        {"security_protocol": "SSL", "ssl_context": "verifies-hostname"},
        id="mutual-tls",
    ),
    pytest.param(
        {
            "security_protocol": "SSL",
            "ssl_certfile": "cert",
            "ssl_keyfile": "key-enc",
            "ssl_password": KEY_PASSWORD,
        },
        {"security_protocol": "SSL", "ssl_context": "verifies-hostname"},
        id="mutual-tls-encrypted-key-system-cas",
    ),
    pytest.param(
        {
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_username": "alice",
            "sasl_password": SECRET,
        },
        {
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_plain_username": "alice",
            "sasl_plain_password": SECRET,
        },
        id="scram-512-plaintext",
    ),
    pytest.param(
        {
            "security_protocol": "sasl_ssl",
            "sasl_mechanism": "scram-sha-256",
            "sasl_username": "bob",
            "sasl_password": SECRET,
            "ssl_cafile": "ca",
        },
        {
            "security_protocol": "SASL_SSL",
            "ssl_context": "verifies-hostname",
            "sasl_mechanism": "SCRAM-SHA-256",
            "sasl_plain_username": "bob",
            "sasl_plain_password": SECRET,
        },
        id="scram-256-over-tls-lowercase",
    ),
    pytest.param(
        {
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": "PLAIN",
            "sasl_username": "carol",
            "sasl_password": SECRET,
        },
        {
            "security_protocol": "SASL_SSL",
            "ssl_context": "verifies-hostname",
            "sasl_mechanism": "PLAIN",
            "sasl_plain_username": "carol",
            "sasl_plain_password": SECRET,
        },
        id="plain-over-tls",
    ),
]


def _context_kind(context: ssl.SSLContext) -> str:
    assert context.verify_mode == ssl.CERT_REQUIRED
    return "verifies-hostname" if context.check_hostname else "no-hostname-check"


@pytest.mark.parametrize(("fields", "expected"), MAPPINGS)
def test_settings_map_to_aiokafka_options(
    pki: Pki, fields: dict[str, Any], expected: dict[str, Any]
) -> None:
    options = client_options(settings(pki, **fields))
    if "ssl_context" in options:
        options["ssl_context"] = _context_kind(options["ssl_context"])
    assert options == expected


def test_the_ca_file_is_what_the_context_trusts(pki: Pki) -> None:
    options = client_options(settings(pki, security_protocol="SSL", ssl_cafile="ca"))
    subjects = [dict(x[0] for x in ca["subject"]) for ca in options["ssl_context"].get_ca_certs()]
    assert {"commonName": "inferbus test ca"} in subjects


@pytest.mark.parametrize(("fields", "expected"), MAPPINGS)
def test_faststream_security_gives_the_same_options(
    pki: Pki, fields: dict[str, Any], expected: dict[str, Any]
) -> None:
    security = KafkaSecurity.of(settings(pki, **fields))
    parsed = parse_security(broker_security(security))
    ours = dict(security.options)
    if not ours.get("ssl_context"):
        ours.pop("ssl_context", None)
        parsed.pop("ssl_context", None)
    if ours["security_protocol"] == "PLAINTEXT":
        assert broker_security(security) is None
        return
    assert parsed == ours


INVALID = [
    pytest.param(
        {"security_protocol": "SASL_SSL", "sasl_username": "a", "sasl_password": SECRET},
        [
            "INFERBUS_KAFKA_SASL_MECHANISM is required with "
            "INFERBUS_KAFKA_SECURITY_PROTOCOL=SASL_SSL"
        ],
        id="sasl-without-mechanism",
    ),
    pytest.param(
        {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN", "sasl_password": SECRET},
        ["INFERBUS_KAFKA_SASL_USERNAME required for PLAIN login"],
        id="mechanism-without-username",
    ),
    pytest.param(
        {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "sasl_username": "a"},
        ["INFERBUS_KAFKA_SASL_PASSWORD required for SCRAM-SHA-512 login"],
        id="mechanism-without-password",
    ),
    pytest.param(
        {
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_username": "",
            "sasl_password": "",
        },
        ["INFERBUS_KAFKA_SASL_USERNAME and INFERBUS_KAFKA_SASL_PASSWORD required"],
        id="empty-credentials",
    ),
    pytest.param(
        {"sasl_mechanism": "PLAIN", "sasl_username": "a", "sasl_password": SECRET},
        [
            "INFERBUS_KAFKA_SASL_MECHANISM, INFERBUS_KAFKA_SASL_USERNAME, "
            "INFERBUS_KAFKA_SASL_PASSWORD set but INFERBUS_KAFKA_SECURITY_PROTOCOL=PLAINTEXT "
            "does not use SASL"
        ],
        id="sasl-with-plaintext",
    ),
    pytest.param(
        {"ssl_cafile": "ca", "ssl_certfile": "cert", "ssl_keyfile": "key"},
        [
            "INFERBUS_KAFKA_SSL_CAFILE, INFERBUS_KAFKA_SSL_CERTFILE, INFERBUS_KAFKA_SSL_KEYFILE "
            "set but INFERBUS_KAFKA_SECURITY_PROTOCOL=PLAINTEXT does not use TLS"
        ],
        id="tls-files-with-plaintext",
    ),
    pytest.param(
        {
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "PLAIN",
            "sasl_username": "a",
            "sasl_password": SECRET,
            "ssl_cafile": "ca",
        },
        ["INFERBUS_KAFKA_SSL_CAFILE set but INFERBUS_KAFKA_SECURITY_PROTOCOL=SASL_PLAINTEXT"],
        id="tls-file-with-sasl-plaintext",
    ),
    pytest.param(
        {"security_protocol": "SSL", "ssl_keyfile": "key"},
        ["INFERBUS_KAFKA_SSL_KEYFILE needs INFERBUS_KAFKA_SSL_CERTFILE"],
        id="key-without-certificate",
    ),
    pytest.param(
        {"security_protocol": "SSL", "ssl_password": SECRET},
        ["INFERBUS_KAFKA_SSL_PASSWORD needs INFERBUS_KAFKA_SSL_CERTFILE"],
        id="key-password-without-certificate",
    ),
    pytest.param(
        {"security_protocol": "SASL_SSL", "ssl_keyfile": "key"},
        [
            "INFERBUS_KAFKA_SASL_MECHANISM is required",
            "INFERBUS_KAFKA_SSL_KEYFILE needs INFERBUS_KAFKA_SSL_CERTFILE",
        ],
        id="every-problem-in-one-error",
    ),
]


@pytest.mark.parametrize(("fields", "expected"), INVALID)
def test_inconsistent_settings_are_refused_naming_the_variables(
    pki: Pki, fields: dict[str, Any], expected: list[str]
) -> None:
    with pytest.raises(KafkaSecurityError) as refused:
        client_options(settings(pki, **fields))
    message = str(refused.value)
    assert message.startswith("invalid Kafka security settings: ")
    for part in expected:
        assert part in message
    assert SECRET not in message


def _junk(tmp_path: Path) -> Path:
    path = tmp_path / "junk.pem"
    path.write_text("not a certificate\n")
    return path


FILES = [
    pytest.param(
        lambda pki, tmp: {"ssl_cafile": tmp / "missing-ca.pem"},
        "INFERBUS_KAFKA_SSL_CAFILE={tmp}/missing-ca.pem: no such file",
        id="missing-ca",
    ),
    pytest.param(
        lambda pki, tmp: {"ssl_certfile": tmp / "missing.pem", "ssl_keyfile": tmp / "missing.key"},
        "INFERBUS_KAFKA_SSL_CERTFILE={tmp}/missing.pem: no such file; "
        "INFERBUS_KAFKA_SSL_KEYFILE={tmp}/missing.key: no such file",
        id="missing-certificate-and-key",
    ),
    pytest.param(
        lambda pki, tmp: {"ssl_cafile": tmp},
        "INFERBUS_KAFKA_SSL_CAFILE={tmp}: not a regular file",
        id="ca-is-a-directory",
    ),
    pytest.param(
        lambda pki, tmp: {"ssl_cafile": _junk(tmp)},
        "INFERBUS_KAFKA_SSL_CAFILE={tmp}/junk.pem holds no PEM CA certificate",
        id="ca-not-pem",
    ),
    pytest.param(
        lambda pki, tmp: {"ssl_certfile": _junk(tmp), "ssl_keyfile": pki.client_key},
        "INFERBUS_KAFKA_SSL_CERTFILE holds no PEM certificate",
        id="certificate-not-pem",
    ),
    pytest.param(
        lambda pki, tmp: {"ssl_certfile": pki.client_cert, "ssl_keyfile": _junk(tmp)},
        "INFERBUS_KAFKA_SSL_KEYFILE holds no PEM private key",
        id="key-not-pem",
    ),
    pytest.param(
        lambda pki, tmp: {"ssl_certfile": pki.client_cert},
        "INFERBUS_KAFKA_SSL_CERTFILE holds no PEM private key: set INFERBUS_KAFKA_SSL_KEYFILE",
        id="certificate-without-key",
    ),
    pytest.param(
        lambda pki, tmp: {"ssl_certfile": pki.client_cert, "ssl_keyfile": pki.rogue_client_key},
        "the key does not belong to the certificate",
        id="key-of-another-certificate",
    ),
    pytest.param(
        lambda pki, tmp: {"ssl_certfile": pki.client_cert, "ssl_keyfile": pki.client_key_encrypted},
        "the key is encrypted: set INFERBUS_KAFKA_SSL_PASSWORD",
        id="encrypted-key-without-password",
    ),
    pytest.param(
        lambda pki, tmp: {
            "ssl_certfile": pki.client_cert,
            "ssl_keyfile": pki.client_key_encrypted,
            "ssl_password": SECRET,
        },
        "INFERBUS_KAFKA_SSL_PASSWORD does not decrypt the key",
        id="encrypted-key-wrong-password",
    ),
]


@pytest.mark.parametrize(("fields", "expected"), FILES)
def test_unusable_tls_files_are_refused_naming_the_variable(
    pki: Pki, tmp_path: Path, fields: Any, expected: str
) -> None:
    with pytest.raises(KafkaSecurityError) as refused:
        client_options(KafkaSecuritySettings(security_protocol="SSL", **fields(pki, tmp_path)))
    assert expected.format(tmp=tmp_path) in str(refused.value)
    assert SECRET not in str(refused.value)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file: no unreadable file to test")
def test_an_unreadable_file_is_refused(tmp_path: Path, pki: Pki) -> None:
    unreadable = tmp_path / "ca.pem"
    unreadable.write_bytes(pki.ca.read_bytes())
    unreadable.chmod(0)
    with pytest.raises(KafkaSecurityError, match=r"INFERBUS_KAFKA_SSL_CAFILE=.*not readable"):
        client_options(KafkaSecuritySettings(security_protocol="SSL", ssl_cafile=unreadable))


def test_a_tls_file_behind_a_folder_this_process_may_not_enter_is_named(
    pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`Path.exists()` raised PermissionError (3.11) with no variable named."""
    cafile = pki.ca
    real_stat = Path.stat

    def stat(self: Path, **kwargs: Any) -> Any:
        if self == cafile:
            raise PermissionError(13, "Permission denied")
        return real_stat(self, **kwargs)

    monkeypatch.setattr(Path, "stat", stat)
    with pytest.raises(KafkaSecurityError) as refused:
        client_options(KafkaSecuritySettings(security_protocol="SSL", ssl_cafile=cafile))
    assert f"INFERBUS_KAFKA_SSL_CAFILE={cafile}: cannot be read by this process" in str(
        refused.value
    )
    assert "Permission denied" in str(refused.value)


ENVIRONMENTS = [
    pytest.param(
        {"INFERBUS_KAFKA_SECURITY_PROTOCOL": "TLS"},
        "INFERBUS_KAFKA_SECURITY_PROTOCOL: Input should be 'PLAINTEXT', 'SSL'",
        id="unknown-protocol",
    ),
    pytest.param(
        {"INFERBUS_KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "INFERBUS_KAFKA_SASL_MECHANISM": "GSSAPI"},
        "INFERBUS_KAFKA_SASL_MECHANISM: Input should be 'PLAIN', 'SCRAM-SHA-256' or "
        "'SCRAM-SHA-512'",
        id="unsupported-mechanism",
    ),
    pytest.param(
        {"INFERBUS_KAFKA_SSL_CHECK_HOSTNAME": "perhaps"},
        "INFERBUS_KAFKA_SSL_CHECK_HOSTNAME: Input should be a valid boolean",
        id="not-a-boolean",
    ),
    # A misspelled variable was ignored: the client went on in plain text, unsaid.
    pytest.param(
        {"INFERBUS_KAFKA_SECURTY_PROTOCOL": "SSL"},
        "INFERBUS_KAFKA_SECURTY_PROTOCOL is not a setting (did you mean "
        "INFERBUS_KAFKA_SECURITY_PROTOCOL?)",
        id="misspelled-protocol",
    ),
    pytest.param(
        {"INFERBUS_KAFKA_SSL_CA_FILE": "perhaps"},
        "INFERBUS_KAFKA_SSL_CA_FILE is not a setting (did you mean INFERBUS_KAFKA_SSL_CAFILE?)",
        id="misspelled-file",
    ),
    pytest.param(
        {"INFERBUS_KAFKA_SASL_PASSWORD_FILE": "perhaps"},
        "INFERBUS_KAFKA_SASL_PASSWORD_FILE is not a setting",
        id="no-such-setting",
    ),
]


@pytest.mark.parametrize(("env", "expected"), ENVIRONMENTS)
def test_bad_environment_values_name_the_variable(
    clean_env: pytest.MonkeyPatch, env: dict[str, str], expected: str
) -> None:
    for name, value in env.items():
        clean_env.setenv(name, value)
    with pytest.raises(KafkaSecurityError) as refused:
        load_settings()
    assert expected in str(refused.value)
    assert "perhaps" not in str(refused.value)  # values stay out: they may be secrets


async def test_the_environment_configures_every_factory_once_per_process(
    clean_env: pytest.MonkeyPatch, pki: Pki
) -> None:
    clean_env.setenv("INFERBUS_KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
    clean_env.setenv("INFERBUS_KAFKA_SASL_MECHANISM", "SCRAM-SHA-512")
    clean_env.setenv("INFERBUS_KAFKA_SASL_USERNAME", "alice")
    clean_env.setenv("INFERBUS_KAFKA_SASL_PASSWORD", SECRET)
    clean_env.setenv("INFERBUS_KAFKA_SSL_CAFILE", str(pki.ca))
    first = process_security()
    assert process_security() is first
    context = first.options["ssl_context"]
    producer = make_producer("127.0.0.1:1")
    consumer = make_consumer(bootstrap="127.0.0.1:1", group_id=None)
    admin = make_admin("127.0.0.1:1")
    for client in (producer.client, consumer._client, admin._client):
        assert client._security_protocol == "SASL_SSL"
        assert client._ssl_context is context
        assert client._sasl_mechanism == "SCRAM-SHA-512"
        assert client._sasl_plain_username == "alice"
    await producer.stop()
    await consumer.stop()
    await admin.close()


async def test_overrides_win_over_security_options(clean_env: pytest.MonkeyPatch, pki: Pki) -> None:
    producer = make_producer(
        "127.0.0.1:1",
        security=settings(pki, security_protocol="SSL", ssl_cafile="ca"),
        security_protocol="PLAINTEXT",
    )
    assert producer.client._security_protocol == "PLAINTEXT"
    await producer.stop()


def test_a_missing_file_in_the_environment_refuses_the_client_at_construction(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    clean_env.setenv("INFERBUS_KAFKA_SECURITY_PROTOCOL", "SSL")
    clean_env.setenv("INFERBUS_KAFKA_SSL_CERTFILE", str(tmp_path / "client.pem"))
    with pytest.raises(KafkaSecurityError, match=r"INFERBUS_KAFKA_SSL_CERTFILE=.*no such file"):
        make_producer("127.0.0.1:1")


def test_secrets_stay_out_of_reprs_and_dumps(pki: Pki) -> None:
    chosen = settings(
        pki,
        security_protocol="SASL_SSL",
        sasl_mechanism="PLAIN",
        sasl_username="alice",
        sasl_password=SECRET,
        ssl_certfile="cert",
        ssl_keyfile="key-enc",
        ssl_password=KEY_PASSWORD,
    )
    security = KafkaSecurity.of(chosen)
    shown = [repr(chosen), str(chosen), chosen.model_dump_json(), repr(security)]
    for text in shown:
        assert SECRET not in text
        assert KEY_PASSWORD not in text


def test_docs_security_lists_every_setting() -> None:
    docs = (Path(__file__).parents[3] / "docs" / "security.md").read_text()
    for name, info in KafkaSecuritySettings.model_fields.items():
        assert info.description, f"{name} has no docstring"
        assert f"`{sec.env(name)}`" in docs, f"{sec.env(name)} is not in docs/security.md"


@pytest.mark.parametrize(
    ("name", "refused"),
    [
        pytest.param("INFERBUS_KAFKA_SECURTY_PROTOCOL", True, id="misspelled"),
        pytest.param("inferbus_kafka_security_protocol", False, id="lower-case-is-read"),
        pytest.param("INFERBUS_KAFKA_SERVICE_HOST", False, id="k8s-service-host"),
        pytest.param("INFERBUS_KAFKA_SERVICE_PORT", False, id="k8s-service-port"),
        pytest.param("INFERBUS_KAFKA_SERVICE_PORT_KAFKA", False, id="k8s-named-port"),
        pytest.param("INFERBUS_KAFKA_PORT", False, id="k8s-port"),
        pytest.param("INFERBUS_KAFKA_PORT_9092_TCP_ADDR", False, id="k8s-port-addr"),
        pytest.param("INFERBUS_KAFKA_0_SERVICE_HOST", False, id="k8s-another-service"),
        pytest.param("OTHER_KAFKA_SECURTY_PROTOCOL", False, id="not-ours"),
    ],
)
def test_unknown_variables_leave_kubernetes_service_links_alone(name: str, refused: bool) -> None:
    """A Service named `inferbus-kafka` puts INFERBUS_KAFKA_SERVICE_HOST and the like in
    every pod of its namespace: refused, no process would start."""
    assert bool(unknown_variables({name: "x"}, known_variables())) is refused


@pytest.mark.parametrize(
    "name",
    ["INFERBUS_KAFKA_SSL_CAFILE", "INFERBUS_KAFKA_SASL_MECHANISM", "INFERBUS_KAFKA_SASL_PASSWORD"],
)
def test_an_empty_variable_is_unset(clean_env: pytest.MonkeyPatch, name: str) -> None:
    """`INFERBUS_KAFKA_SSL_CAFILE=` with PLAINTEXT said "set but ... does not use TLS", and
    with SSL named the file `.`."""
    clean_env.setenv(name, "")
    settings = load_settings()
    assert getattr(settings, name.removeprefix("INFERBUS_KAFKA_").lower()) is None
    assert problems(settings) == []

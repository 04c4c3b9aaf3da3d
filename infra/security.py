"""Kafka TLS and SASL settings (env prefix `INFERBUS_KAFKA_`), checked at start, as client options.

Every Kafka client of the project takes its security options from here, through the
factories in `infra.kafka`. Secrets are `SecretStr`: they show as `**********` in reprs and
never enter a log line, an error message or a span; only the aiokafka options dict holds
them in clear, because aiokafka needs them so, and nothing logs that dict.
"""

from __future__ import annotations

import difflib
import functools
import os
import re
import ssl
import stat
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from pydantic import SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from infra.settings import KafkaSettings
from schemas.errors import InferbusError

ENV_PREFIX = "INFERBUS_KAFKA_"
SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
TLS_PROTOCOLS = frozenset({"SSL", "SASL_SSL"})
SASL_PROTOCOLS = frozenset({"SASL_PLAINTEXT", "SASL_SSL"})
TLS_FILES = ("ssl_cafile", "ssl_certfile", "ssl_keyfile")


class KafkaSecurityError(InferbusError):
    """Kafka security settings are unusable or the broker refused them; names the setting."""


def env(name: str) -> str:
    """The environment variable of a settings field, e.g. `INFERBUS_KAFKA_SSL_CAFILE`."""
    return f"{ENV_PREFIX}{name.upper()}"


class KafkaSecuritySettings(BaseSettings):
    """How every Kafka client authenticates and encrypts; documented in docs/security.md."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        extra="ignore",
        env_ignore_empty=True,  # `VAR=` in compose or a pod spec: unset, not an empty path
        frozen=True,
        hide_input_in_errors=True,
        use_attribute_docstrings=True,
    )

    security_protocol: SecurityProtocol = "PLAINTEXT"
    """PLAINTEXT, SSL (TLS), SASL_PLAINTEXT or SASL_SSL (SASL inside TLS)."""
    sasl_mechanism: SaslMechanism | None = None
    """PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512; required with the SASL_* protocols."""
    sasl_username: str | None = None
    """SASL user name (the principal in ACLs is `User:<name>`)."""
    sasl_password: SecretStr | None = None
    """SASL password; never logged."""
    ssl_cafile: Path | None = None
    """PEM file of the CA certificates that sign the brokers'; default: the system's CAs."""
    ssl_certfile: Path | None = None
    """PEM client certificate for mutual TLS (may also hold the key)."""
    ssl_keyfile: Path | None = None
    """PEM private key of the client certificate."""
    ssl_password: SecretStr | None = None
    """Password of an encrypted `ssl_keyfile`; never logged."""
    ssl_check_hostname: bool = True
    """Check that the broker's certificate names the host connected to."""

    @field_validator("security_protocol", "sasl_mechanism", mode="before")
    @classmethod
    def _upper(cls, value: object) -> object:
        return value.strip().upper() if isinstance(value, str) else value

    @property
    def tls(self) -> bool:
        """True when connections are encrypted."""
        return self.security_protocol in TLS_PROTOCOLS

    @property
    def sasl(self) -> bool:
        """True when clients authenticate with SASL."""
        return self.security_protocol in SASL_PROTOCOLS


def load_settings() -> KafkaSecuritySettings:
    """The settings from the environment; a bad value, or an `INFERBUS_KAFKA_` variable
    that is no setting (a misspelled one would leave the client in plain text, unsaid),
    raises one error naming each variable."""
    found = unknown_variables(os.environ, known_variables())
    try:
        settings = KafkaSecuritySettings()
    except ValidationError as exc:
        # hide_input_in_errors keeps values (secrets included) out of pydantic's messages.
        found += [f"{env(str(e['loc'][0]))}: {e['msg']}" for e in exc.errors()]
    if found:
        raise KafkaSecurityError("invalid Kafka settings: " + "; ".join(found)) from None
    return settings


def known_variables() -> frozenset[str]:
    """Every `INFERBUS_KAFKA_` variable a setting reads (the clients' and security's)."""
    return frozenset(
        env(name) for name in (*KafkaSettings.model_fields, *KafkaSecuritySettings.model_fields)
    )


KUBERNETES_SERVICE_LINK = re.compile(
    r"_(SERVICE_HOST|SERVICE_PORT(_[A-Z0-9_]+)?|PORT(_\d+_(TCP|UDP|SCTP)(_(PROTO|PORT|ADDR))?)?)$"
)
"""What Kubernetes sets in every pod for each Service (one named `inferbus-kafka` gives
`INFERBUS_KAFKA_SERVICE_HOST`, `INFERBUS_KAFKA_PORT_9092_TCP`, ...): not a misspelling."""


def unknown_variables(environ: Mapping[str, str], known: Collection[str]) -> list[str]:
    """Each `INFERBUS_KAFKA_` variable in `environ` that no setting reads, with the nearest
    known name (Kubernetes' service links left out)."""
    found = []
    for name in sorted(environ):
        upper = name.upper()
        if not upper.startswith(ENV_PREFIX) or upper in known:
            continue
        if KUBERNETES_SERVICE_LINK.search(upper):
            continue
        near = difflib.get_close_matches(upper, list(known), n=1, cutoff=0.75)
        hint = f" (did you mean {near[0]}?)" if near else " (docs/settings.md lists them)"
        found.append(f"{name} is not a setting{hint}")
    return found


def problems(settings: KafkaSecuritySettings) -> list[str]:
    """What is inconsistent between the settings, each naming its variables (no file I/O)."""
    found: list[str] = []
    protocol = f"{env('security_protocol')}={settings.security_protocol}"
    sasl_set = [
        env(name)
        for name in ("sasl_mechanism", "sasl_username", "sasl_password")
        if getattr(settings, name) is not None
    ]
    if not settings.sasl and sasl_set:
        found.append(
            f"{', '.join(sasl_set)} set but {protocol} does not use SASL: "
            "use SASL_SSL (or SASL_PLAINTEXT), or unset them"
        )
    if settings.sasl and settings.sasl_mechanism is None:
        found.append(f"{env('sasl_mechanism')} is required with {protocol}")
    if settings.sasl:
        missing = [
            env(name)
            for name in ("sasl_username", "sasl_password")
            if not _filled(getattr(settings, name))
        ]
        if missing:
            mechanism = settings.sasl_mechanism or "SASL"
            found.append(f"{' and '.join(missing)} required for {mechanism} login")
    tls_set = [env(name) for name in (*TLS_FILES, "ssl_password") if getattr(settings, name)]
    if not settings.tls and tls_set:
        found.append(
            f"{', '.join(tls_set)} set but {protocol} does not use TLS: "
            "use SSL or SASL_SSL, or unset them"
        )
    if settings.ssl_keyfile and not settings.ssl_certfile:
        found.append(f"{env('ssl_keyfile')} needs {env('ssl_certfile')}")
    if settings.ssl_password and not settings.ssl_certfile:
        found.append(f"{env('ssl_password')} needs {env('ssl_certfile')} (and its key)")
    return found


def _filled(value: str | SecretStr | None) -> bool:
    if isinstance(value, SecretStr):
        return bool(value.get_secret_value())
    return bool(value)


def _file_problem(name: str, path: Path) -> str | None:
    where = f"{env(name)}={path}"
    try:
        found = path.stat()
    except (FileNotFoundError, NotADirectoryError):
        return f"{where}: no such file"
    except OSError as exc:  # a folder on its path this process may not enter, among others
        return f"{where}: cannot be read by this process (uid {os.getuid()}): {exc.strerror}"
    if not stat.S_ISREG(found.st_mode):
        return f"{where}: not a regular file"
    if not os.access(path, os.R_OK):
        return f"{where}: not readable by this process (uid {os.getuid()})"
    return None


def ssl_context(settings: KafkaSecuritySettings) -> ssl.SSLContext:
    """A client TLS context from the CA, certificate and key files; errors name the setting."""
    found = [
        problem
        for name in TLS_FILES
        if (path := getattr(settings, name)) is not None
        and (problem := _file_problem(name, path)) is not None
    ]
    if found:
        raise KafkaSecurityError("unusable Kafka TLS files: " + "; ".join(found))
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    context.check_hostname = settings.ssl_check_hostname
    if settings.ssl_cafile is not None:
        try:
            context.load_verify_locations(cafile=settings.ssl_cafile)
        except ssl.SSLError as exc:
            raise KafkaSecurityError(
                f"{env('ssl_cafile')}={settings.ssl_cafile} holds no PEM CA certificate "
                f"({exc.reason or exc})"
            ) from None
    if settings.ssl_certfile is not None:
        _load_client_certificate(context, settings)
    return context


def _load_client_certificate(context: ssl.SSLContext, settings: KafkaSecuritySettings) -> None:
    certfile = settings.ssl_certfile
    assert certfile is not None  # checked by the caller
    password = settings.ssl_password.get_secret_value() if settings.ssl_password else None
    try:
        # A callable, so that an encrypted key without a password fails here instead of
        # OpenSSL prompting on the terminal.
        context.load_cert_chain(certfile, settings.ssl_keyfile, password=lambda: password or "")
    except ssl.SSLError as exc:
        files = f"{env('ssl_certfile')}={certfile}"
        if settings.ssl_keyfile is not None:
            files += f", {env('ssl_keyfile')}={settings.ssl_keyfile}"
        hint = _certificate_hint(settings, exc.reason or str(exc))
        raise KafkaSecurityError(f"cannot load the client certificate {files}: {hint}") from None


def _certificate_hint(settings: KafkaSecuritySettings, reason: str) -> str:
    """Why OpenSSL's "PEM lib" refused the pair: it says the same for every cause."""
    assert settings.ssl_certfile is not None
    key_name = "ssl_keyfile" if settings.ssl_keyfile is not None else "ssl_certfile"
    key_path = settings.ssl_keyfile or settings.ssl_certfile
    certificate = settings.ssl_certfile.read_text(errors="replace")
    key = key_path.read_text(errors="replace")
    if "-----BEGIN CERTIFICATE-----" not in certificate:
        return f"{env('ssl_certfile')} holds no PEM certificate"
    if "PRIVATE KEY-----" not in key:
        if settings.ssl_keyfile is None:  # the certificate's file was read for its key
            return (
                f"{env('ssl_certfile')} holds no PEM private key: set {env('ssl_keyfile')} "
                "to the key's file"
            )
        return f"{env(key_name)} holds no PEM private key"
    if reason == "KEY_VALUES_MISMATCH":
        return "the key does not belong to the certificate"
    if "ENCRYPTED" in key:
        if settings.ssl_password is None:
            return f"the key is encrypted: set {env('ssl_password')}"
        return f"{env('ssl_password')} does not decrypt the key"
    return f"OpenSSL refused them ({reason})"


def client_options(settings: KafkaSecuritySettings) -> dict[str, Any]:
    """aiokafka keyword arguments for `settings`, after checking them and their files.

    The dict holds the SASL password in clear (aiokafka needs it): never log it.
    """
    found = problems(settings)
    if found:
        raise KafkaSecurityError("invalid Kafka security settings: " + "; ".join(found))
    options: dict[str, Any] = {"security_protocol": settings.security_protocol}
    if settings.tls:
        options["ssl_context"] = ssl_context(settings)
    if settings.sasl:
        assert settings.sasl_password is not None  # checked by problems()
        options["sasl_mechanism"] = settings.sasl_mechanism
        options["sasl_plain_username"] = settings.sasl_username
        options["sasl_plain_password"] = settings.sasl_password.get_secret_value()
    return options


@dataclass(frozen=True)
class KafkaSecurity:
    """Checked settings and the client options they give (the options stay out of reprs)."""

    settings: KafkaSecuritySettings
    options: Mapping[str, Any] = field(repr=False)

    @classmethod
    def of(cls, settings: KafkaSecuritySettings) -> KafkaSecurity:
        """Check `settings` and build their options (TLS context included)."""
        return cls(settings, MappingProxyType(client_options(settings)))


@functools.cache
def process_security() -> KafkaSecurity:
    """This process's security, read from the environment once (the TLS context is shared)."""
    return KafkaSecurity.of(load_settings())


def resolve(settings: KafkaSecuritySettings | None) -> KafkaSecurity:
    """`settings` checked, or the process's own when None."""
    return process_security() if settings is None else KafkaSecurity.of(settings)


def broker_security(security: KafkaSecurity) -> Any:
    """The FastStream `security=` object giving the same aiokafka options, or None."""
    from faststream.security import BaseSecurity, SASLPlaintext, SASLScram256, SASLScram512

    settings, options = security.settings, security.options
    context = options.get("ssl_context")
    if not settings.sasl:
        return BaseSecurity(ssl_context=context) if settings.tls else None
    kinds = {"PLAIN": SASLPlaintext, "SCRAM-SHA-256": SASLScram256, "SCRAM-SHA-512": SASLScram512}
    return kinds[options["sasl_mechanism"]](
        username=options["sasl_plain_username"],
        password=options["sasl_plain_password"],
        ssl_context=context,
        use_ssl=settings.tls,
    )

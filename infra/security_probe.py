"""Why a Kafka client could not start: probe the broker step by step and name the setting.

aiokafka reports every refused TLS handshake or SASL login as "Unable to bootstrap" (or,
for a SCRAM error answer, a bare KeyError). After a failed start, `explain_refusal` opens
one connection at a time, adding one layer per step (TCP, then TLS and a Kafka request,
then SASL), and turns the first layer that fails into a `KafkaSecurityError` that says
which `INFERBUS_KAFKA_*` setting to fix. A broker that is simply not up is not a security
problem: it returns None and the caller's retry goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from typing import Any

from aiokafka.conn import collect_hosts, create_conn
from aiokafka.errors import UnsupportedSaslMechanismError
from aiokafka.protocol.metadata import MetadataRequest

from infra.security import KafkaSecurity, KafkaSecurityError, env

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 5.0
"""Longest one probe step waits, seconds (a TLS client on a plain listener hangs)."""


async def explain_refusal(bootstrap: str, security: KafkaSecurity) -> KafkaSecurityError | None:
    """The security reason the first reachable bootstrap host refuses us, or None."""
    for host, port, _ in collect_hosts(bootstrap, randomize=False):
        if not await _reachable(host, port):
            continue
        try:
            return await _explain(host, port, security)
        except Exception as exc:  # The probe only adds detail; the caller raises its own error.
            log.warning("event=kafka_probe_failed host=%s port=%d error=%r", host, port, exc)
            return None
    return None


async def plain_listener(bootstrap: str) -> str | None:
    """The first bootstrap host whose listener answers plain-text Kafka, or None."""
    plain = {"security_protocol": "PLAINTEXT", "ssl_context": None}
    for host, port, _ in collect_hosts(bootstrap, randomize=False):
        if await _try(host, port, plain, metadata=False) is None:
            return f"{host}:{port}"
    return None


def tls_on_a_plain_listener(where: str, security: KafkaSecurity) -> KafkaSecurityError:
    """A client set for TLS whose broker's listener answers plain text."""
    settings = security.settings
    plain = "SASL_PLAINTEXT" if settings.sasl else "PLAINTEXT"
    return KafkaSecurityError(
        f"the broker's listener answers plain-text Kafka, but "
        f"{env('security_protocol')}={settings.security_protocol} expects TLS: set it to "
        f"{plain}, or give the broker's TLS listener",
        broker=where,
    )


async def _reachable(host: str, port: int) -> bool:
    try:
        async with asyncio.timeout(PROBE_TIMEOUT_S):
            _, writer = await asyncio.open_connection(host, port)
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


async def _explain(host: str, port: int, security: KafkaSecurity) -> KafkaSecurityError | None:
    settings, options = security.settings, security.options
    where = f"{host}:{port}"
    transport = {
        "security_protocol": "SSL" if settings.tls else "PLAINTEXT",
        "ssl_context": options.get("ssl_context"),
    }
    failure = await _try(host, port, transport, metadata=not settings.sasl)
    if failure is not None:
        listener_tls = not settings.tls and await _speaks_tls(host, port)
        return _transport_refusal(failure, security, where, listener_tls=listener_tls)
    if settings.sasl:
        failure = await _try(host, port, dict(options), metadata=True)
        if failure is not None:
            return _sasl_refusal(failure, security, where)
    return None


async def _try(
    host: str, port: int, options: dict[str, Any], *, metadata: bool
) -> BaseException | None:
    """Connect (ApiVersions, SASL when in `options`), then ask for metadata; the error or None."""
    try:
        async with asyncio.timeout(PROBE_TIMEOUT_S):
            conn = await create_conn(
                host,
                port,
                client_id="inferbus-probe",
                request_timeout_ms=int(PROBE_TIMEOUT_S * 1000),
                **options,
            )
            try:
                if metadata:
                    await conn.send(MetadataRequest([]))
            finally:
                conn.close()
    except Exception as exc:
        # Everything is an answer here: aiokafka's SCRAM client raises KeyError on an
        # error reply, a TLS client on a plain listener times out.
        return exc
    return None


def _transport_refusal(
    failure: BaseException, security: KafkaSecurity, where: str, *, listener_tls: bool
) -> KafkaSecurityError | None:
    """TLS, or the lack of it, made the broker refuse: which setting to change."""
    if isinstance(failure, ssl.SSLCertVerificationError):
        return _untrusted_broker(failure, security, where)
    if security.settings.tls:
        return _tls_refusal(failure, security, where)
    return _plain_refusal(failure, security, where, listener_tls=listener_tls)


def _untrusted_broker(
    failure: ssl.SSLCertVerificationError, security: KafkaSecurity, where: str
) -> KafkaSecurityError:
    settings = security.settings
    if "mismatch" in (failure.verify_message or "").lower():  # hostname or IP address
        hint = f"connect by a name the certificate holds (or {env('ssl_check_hostname')}=false)"
    else:
        hint = f"set {env('ssl_cafile')} to the CA that signed it"
    return KafkaSecurityError(
        f"the broker's TLS certificate did not verify ({failure.verify_message}): {hint}",
        broker=where,
        cafile=settings.ssl_cafile or "system CAs",
    )


def _tls_refusal(failure: BaseException, security: KafkaSecurity, where: str) -> KafkaSecurityError:
    settings = security.settings
    cause = _describe(failure)
    if isinstance(failure, TimeoutError | ssl.SSLError):
        return KafkaSecurityError(
            f"no TLS answer from the broker ({cause}): is this a TLS listener? "
            f"{env('security_protocol')}={settings.security_protocol} expects one; use "
            "PLAINTEXT or SASL_PLAINTEXT for a plain listener",
            broker=where,
        )
    closed = "the broker closed the TLS connection after the handshake"
    # A listener that wants SASL inside TLS closes the same way: with SSL, say so too.
    or_sasl = (
        ""
        if settings.sasl
        else f"; or its listener requires SASL over TLS: set {env('security_protocol')}="
        f"SASL_SSL with {env('sasl_mechanism')}, {env('sasl_username')} and "
        f"{env('sasl_password')}"
    )
    if settings.ssl_certfile is None:
        return KafkaSecurityError(
            f"{closed}: it requires a client certificate (mutual TLS) and none is set: "
            f"set {env('ssl_certfile')} and {env('ssl_keyfile')}{or_sasl}",
            broker=where,
            cause=cause,
        )
    return KafkaSecurityError(
        f"{closed}: it did not accept the client certificate "
        f"{env('ssl_certfile')}={settings.ssl_certfile} (signed by a CA the broker does not "
        f"trust, expired, or not for client auth){or_sasl}",
        broker=where,
        cause=cause,
    )


def _plain_refusal(
    failure: BaseException, security: KafkaSecurity, where: str, *, listener_tls: bool
) -> KafkaSecurityError | None:
    protocol = f"{env('security_protocol')}={security.settings.security_protocol}"
    if isinstance(failure, TimeoutError):
        return None  # A slow broker, not a refusal: nothing to name.
    if listener_tls:
        return KafkaSecurityError(
            f"the broker's listener speaks TLS but {protocol}: set it to SSL (or SASL_SSL)",
            broker=where,
        )
    return KafkaSecurityError(
        f"the broker closed a plain-text connection: its listener may require SASL "
        f"({protocol}): set it to SASL_PLAINTEXT (or SASL_SSL) with {env('sasl_mechanism')}, "
        f"{env('sasl_username')} and {env('sasl_password')}",
        broker=where,
        cause=_describe(failure),
    )


async def _speaks_tls(host: str, port: int) -> bool:
    """True when a TLS handshake (no verification: only the listener's kind matters) works."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        async with asyncio.timeout(PROBE_TIMEOUT_S):
            _, writer = await asyncio.open_connection(host, port, ssl=context)
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError, ssl.SSLError):
        await writer.wait_closed()
    return True


NO_MECHANISMS = "Enabled mechanisms are: []"
"""How aiokafka's UnsupportedSaslMechanismError ends when the broker enables none."""


def _sasl_refusal(
    failure: BaseException, security: KafkaSecurity, where: str
) -> KafkaSecurityError:
    settings = security.settings
    mechanism = f"{env('sasl_mechanism')}={settings.sasl_mechanism}"
    if isinstance(failure, UnsupportedSaslMechanismError):
        if NO_MECHANISMS in str(failure):  # aiokafka lists the broker's: none at all
            plain = "SSL" if settings.tls else "PLAINTEXT"
            return KafkaSecurityError(
                f"the broker offers no SASL mechanism: its listener does not use SASL: set "
                f"{env('security_protocol')}={plain} and unset {env('sasl_mechanism')}, "
                f"{env('sasl_username')} and {env('sasl_password')}",
                broker=where,
                cause=_describe(failure),
            )
        return KafkaSecurityError(
            f"the broker does not enable {mechanism}: use a mechanism it offers",
            broker=where,
            cause=_describe(failure),
        )
    return KafkaSecurityError(
        f"the broker refused the SASL login of {env('sasl_username')}={settings.sasl_username} "
        f"with {mechanism}: check {env('sasl_password')}, that the user exists for this "
        "mechanism and that the broker enables it",
        broker=where,
        cause=_describe(failure),
    )


def _describe(failure: BaseException) -> str:
    if isinstance(failure, KeyError):
        return "the broker answered the SCRAM exchange with an error instead of its signature"
    if isinstance(failure, TimeoutError):
        return f"no answer within {PROBE_TIMEOUT_S:.0f}s"
    name, text = type(failure).__name__, str(failure)
    return text if text.startswith(name) else f"{name}: {text or 'no detail'}"

"""Throwaway PKI for TLS tests: a CA, a server certificate and client certificates (openssl CLI)."""

from __future__ import annotations

import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

KEY_PASSWORD = "k3y-pa55-for-tests"
"""Password of the encrypted copy of the client key."""


@dataclass(frozen=True)
class Pki:
    """Paths of the generated PEM files."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    client_key_encrypted: Path
    rogue_ca: Path
    rogue_client_cert: Path
    rogue_client_key: Path


def _openssl(*args: str, cwd: Path) -> None:
    result = subprocess.run(
        ["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)} failed: {result.stderr.strip()}")


def _ca(folder: Path, name: str) -> None:
    _openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "2",
        "-subj", f"/CN=inferbus test {name}",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=folder,
    )  # fmt: skip


def _leaf(folder: Path, name: str, ca: str, extensions: str) -> None:
    _openssl(
        "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}",
        cwd=folder,
    )  # fmt: skip
    (folder / f"{name}.ext").write_text(
        "basicConstraints=critical,CA:FALSE\n"
        "authorityKeyIdentifier=keyid,issuer\nsubjectKeyIdentifier=hash\n" + extensions
    )
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
        "-set_serial", str(secrets.randbelow(2**62) + 1), "-days", "2",
        "-out", f"{name}.pem", "-extfile", f"{name}.ext",
        cwd=folder,
    )  # fmt: skip


def make_pki(folder: Path) -> Pki:
    """Generate every file under `folder` (EC P-256 keys: fast)."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to generate test certificates")
    _ca(folder, "ca")
    _ca(folder, "rogue-ca")
    server = "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"
    client = "extendedKeyUsage=clientAuth\n"
    _leaf(folder, "server", "ca", server)
    _leaf(folder, "client", "ca", client)
    _leaf(folder, "rogue-client", "rogue-ca", client)
    _openssl(
        "pkey", "-in", "client.key", "-aes256", "-passout", f"pass:{KEY_PASSWORD}",
        "-out", "client-encrypted.key",
        cwd=folder,
    )  # fmt: skip
    return Pki(
        ca=folder / "ca.pem",
        server_cert=folder / "server.pem",
        server_key=folder / "server.key",
        client_cert=folder / "client.pem",
        client_key=folder / "client.key",
        client_key_encrypted=folder / "client-encrypted.key",
        rogue_ca=folder / "rogue-ca.pem",
        rogue_client_cert=folder / "rogue-client.pem",
        rogue_client_key=folder / "rogue-client.key",
    )

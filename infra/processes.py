"""Supervised child processes: start with death-signal to parent, stop with TERM then KILL."""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

log = logging.getLogger(__name__)


def die_with_parent() -> None:
    """In a child, before exec: Linux sends SIGTERM when the parent dies, so no orphan stays.

    The death signal follows the thread that forked: fork from a long-lived thread (the
    event loop's, the main one), not from a short-lived worker thread.
    """
    if sys.platform.startswith("linux"):
        pr_set_pdeathsig = 1
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM)


def inferbus_command(*args: str) -> list[str]:
    """The command line that runs `inferbus ARGS...` with this interpreter."""
    return [sys.executable, "-m", "services.cli.main", *args]


class ChildProcess:
    """One child process; `start()` and `stop()` are idempotent."""

    def __init__(
        self,
        name: str,
        command: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        log_path: Path | None = None,
    ) -> None:
        self.name = name
        self.command = list(command)
        self.env = {**os.environ, **(env or {})}
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        if self.running:
            return
        output = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        self.process = subprocess.Popen(
            self.command,
            env=self.env,
            stdout=output,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent,  # noqa: PLW1509 - prctl only
        )
        log.info("event=child_started name=%s pid=%d", self.name, self.process.pid)

    def signal_stop(self) -> None:
        """Ask the child to drain and exit (SIGTERM), without waiting."""
        if self.running and self.process is not None:
            self.process.send_signal(signal.SIGTERM)

    def stop(self, timeout_s: float = 15.0) -> int | None:
        """SIGTERM, wait up to `timeout_s`, then SIGKILL; returns the exit code."""
        process = self.process
        if process is None:
            return None
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                log.warning(
                    "event=child_kill name=%s pid=%d after_s=%.0f",
                    self.name,
                    process.pid,
                    timeout_s,
                )
                process.kill()
                process.wait(timeout=5)
        log.info("event=child_stopped name=%s returncode=%s", self.name, process.returncode)
        return process.returncode


def name_this_thread(name: str) -> None:
    """Give the calling OS thread a name (15 bytes at most) that /proc and top show."""
    if sys.platform.startswith("linux"):
        pr_set_name = 15
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(pr_set_name, name.encode()[:15], 0, 0, 0)

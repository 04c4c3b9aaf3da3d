"""Ctrl-C on `inferbus up` (or `make up`) in a terminal: the terminal sends SIGINT to the
whole foreground process group. The stack must stop in order (workers drain, then ingest,
then the broker) and leave nothing behind; its children live in their own process groups,
so the signal reaches `inferbus up` alone."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

READY_WITHIN_S = 180.0
STOPPED_WITHIN_S = 60.0


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for its new parent to reap it is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _children_of(pid: int) -> list[int]:
    """Every process whose parent is `pid` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid:
            found.append(int(entry.name))
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_sigint_to_the_terminal_group_stops_the_stack_in_order(tmp_path: Path) -> None:
    log = tmp_path / "up.log"
    with log.open("wb") as out:
        up = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "services.cli.main",
                "up",
                "--headless",
                "--tiers",
                "interactive",
                "--models",
                str(tmp_path / "models"),
                "--log-dir",
                str(tmp_path / "logs"),
                "--port",
                "0",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group: the terminal's, as under a shell
        )
    try:
        deadline = time.monotonic() + READY_WITHIN_S
        while b"ready: every group has a worker serving" not in log.read_bytes():
            assert up.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.5)
        children = _children_of(up.pid)
        assert len(children) >= 3, children  # broker, ingest, the workers

        os.killpg(up.pid, signal.SIGINT)  # what Ctrl-C does: the whole foreground group
        returncode = up.wait(timeout=STOPPED_WITHIN_S)

        text = log.read_text()
        assert returncode == 0, text[-3000:]
        assert "inferbus stopping: draining workers, ingest, broker" in text
        assert "inferbus stopped" in text
        for path in [log, *sorted((tmp_path / "logs").glob("*.log"))]:
            written = path.read_text(errors="replace")
            for symptom in ("Traceback", "Unclosed AIOKafka"):
                assert symptom not in written, f"{path.name}: {written[-3000:]}"
        left = [pid for pid in children if _alive(pid)]
        assert not left, f"still running after the stack stopped: {left}"
    finally:
        # Each child leads its own process group: kill them there, then `up`'s.
        for pid in [*_children_of(up.pid), up.pid]:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        up.wait(timeout=10)  # SIGKILLed: it cannot outlive this

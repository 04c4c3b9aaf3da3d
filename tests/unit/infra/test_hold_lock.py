"""A lock file one process holds: `inferbus up` runs once per log directory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from infra.files import AlreadyRunning, hold_lock
from services.cli.main import app


def test_a_held_lock_refuses_a_second_holder_and_names_the_first(tmp_path: Path) -> None:
    path = tmp_path / "logs" / "up.lock"
    first = hold_lock(path)

    with pytest.raises(AlreadyRunning) as refused:
        hold_lock(path)

    assert refused.value.pid == os.getpid()
    first.close()
    hold_lock(path).close()  # free once its holder closed it


def test_the_lock_of_a_killed_holder_is_free(tmp_path: Path) -> None:
    """SIGKILL runs no cleanup: the lock must go with the process, not with a file."""
    path = tmp_path / "up.lock"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from infra.files import hold_lock; "
            f"h = hold_lock(Path({str(path)!r})); print('held', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[3],  # the checkout: `infra` importable
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(AlreadyRunning) as refused:
            hold_lock(path)
        assert refused.value.pid == holder.pid
    finally:
        holder.kill()
        holder.wait()

    hold_lock(path).close()


def test_a_second_up_in_the_same_log_dir_is_refused_before_it_starts_anything(
    tmp_path: Path,
) -> None:
    """Regression: it started a whole second stack on another port, its ingest appending
    to the first one's log files."""
    logs = tmp_path / "logs"
    held = hold_lock(logs / "up.lock")
    try:
        result = CliRunner().invoke(
            app, ["up", "--log-dir", str(logs), "--models", str(tmp_path / "models")]
        )
    finally:
        held.close()

    assert result.exit_code == 1
    assert f"inferbus up already runs here (pid {os.getpid()}, logs in {logs})" in result.output
    assert "--log-dir" in result.output
    assert not (tmp_path / "models").exists(), "nothing started: no demo models written"

"""Run the CLI with its standard output's reader already gone (`inferbus ... | head`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_to_a_gone_reader(args: list[str]) -> subprocess.CompletedProcess[bytes]:
    """`inferbus ARGS` (its console entry point) writing to a pipe nobody reads."""
    read, write = os.pipe()
    os.close(read)  # the reader has gone before the first line
    try:
        return subprocess.run(
            [sys.executable, "-c", "from services.cli.main import main; main()", *args],
            check=False,
            stdout=write,
            stderr=subprocess.PIPE,
            cwd=ROOT,
            timeout=60,
        )
    finally:
        os.close(write)

"""A bench whose worker or ingest exited ends in one line naming its log, not a traceback."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from infra.processes import ChildProcess
from services.bench.throughput import BenchFailed, Deployment
from services.cli.common import one_line


def test_an_exited_child_is_one_line_naming_its_log(tmp_path: Path) -> None:
    log = tmp_path / "worker-m-0.log"
    child = ChildProcess("worker-m-0", [sys.executable, "-c", "raise SystemExit(3)"], log_path=log)
    child.start()
    assert child.process is not None
    child.process.wait(timeout=30)
    deployment = Deployment("127.0.0.1:9", tmp_path, ["m"], tmp_path)
    deployment.children.append(child)

    with pytest.raises(BenchFailed) as failed:
        deployment.check()

    assert one_line(failed.value) == f"worker-m-0 exited with 3; see {log}"

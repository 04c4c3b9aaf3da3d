"""Services told to stop while their broker is gone stop within their documented limit and
say what they gave up. Before: every step that needed the broker waited the Kafka
client's 30 s request timeout in turn: ingest ran on 3.5 minutes after SIGTERM, a worker
2, the scaler 3 (docs/operations.md, "Stopping a service")."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from infra.broker import EmbeddedBroker
from infra.models.repository import ModelRepository
from infra.processes import inferbus_command
from infra.topics import ensure_topics, repository_topics
from services.cli.common import run
from services.ingest.app import STOP_LIMIT_S
from services.models.demo import write_demo_models
from services.worker.settings import NOTICE_S, STOP_AFTER_DRAIN_S

pytestmark = pytest.mark.integration

DRAIN_S = 2.0


def _wait_for(path: Path, text: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if text in path.read_text(errors="replace"):
            return
        time.sleep(0.2)
    raise AssertionError(f"no {text!r} in {path} within {timeout_s:.0f}s")


def test_ingest_and_a_worker_stop_in_time_with_the_broker_gone(tmp_path: Path) -> None:
    models = tmp_path / "models"
    write_demo_models(models)
    broker = EmbeddedBroker(port=0)
    bootstrap = broker.start()
    children: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}
    try:
        run(ensure_topics(bootstrap, repository_topics(ModelRepository(models))))
        commands = {
            "ingest": ["ingest", "--models", str(models)],
            "worker": ["worker", "--model", "demo-mlp", "--models", str(models)],
        }
        for name, args in commands.items():
            log_path = tmp_path / f"{name}.log"
            with log_path.open("wb") as out:
                process = subprocess.Popen(
                    inferbus_command(*args, "--bootstrap", bootstrap),
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env={**os.environ, "INFERBUS_WORKER_DRAIN_TIMEOUT_S": str(DRAIN_S)},
                )
            children[name] = (process, log_path)
        _wait_for(children["ingest"][1], "event=ingest_ready", 90)
        _wait_for(children["worker"][1], "event=worker_ready", 90)
        broker.stop()
        time.sleep(1.0)

        started = time.monotonic()
        for process, _ in children.values():
            process.send_signal(signal.SIGTERM)
        limits = {"ingest": STOP_LIMIT_S, "worker": NOTICE_S + DRAIN_S + STOP_AFTER_DRAIN_S}
        for name, (process, log_path) in children.items():
            # The limit, plus the interpreter's exit (tasks cancelled, tracing flushed).
            left = limits[name] + 5.0 - (time.monotonic() - started)
            assert process.wait(timeout=max(left, 0.1)) == 0, log_path.read_text()[-3000:]
            text = log_path.read_text(errors="replace")
            assert f"event=stopping service={name}" in text
            assert "event=stop_step_cut" in text, "what it gave up is said"
    finally:
        for process, _ in children.values():
            with contextlib.suppress(ProcessLookupError):
                process.kill()
        broker.stop()

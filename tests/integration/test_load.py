"""`inferbus load` against a real broker with ingest and workers running in this process."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio
from aiokafka import TopicPartition
from typer.testing import CliRunner

from infra.broker import EmbeddedBroker
from infra.kafka import make_consumer, make_producer
from infra.log_end import LogEndProbe
from infra.models.repository import ModelRepository
from infra.topics import TopicSpec, ensure_topics, standard_topics
from schemas.topics import DECISIONS
from services.cli.main import app
from services.ingest.app import IngestService
from services.ingest.settings import IngestSettings
from services.load.driver import LoadError, RunOptions, Status
from services.load.results import ResultReader
from services.load.run import LoadSpec, run_load
from services.load.scenarios import rate_workload
from services.worker.app import Worker
from services.worker.settings import WorkerSettings
from tests.integration.stack import derive_model

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]
GROUP = "inferbus.workers.load-encoder.interactive"


@dataclass
class Stack:
    bootstrap: str
    models: Path


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def stack(
    broker: str, demo_models: Path, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Stack]:
    """Ingest and one demo-encoder worker for interactive and batch, under a model name of
    this module's own (its groups and topics see no other test's workers)."""
    models = tmp_path_factory.mktemp("load-repo")
    (models / "demo-encoder").symlink_to(demo_models / "demo-encoder")
    derive_model(models, "demo-encoder", "load-encoder")
    (models / "demo-encoder").unlink()
    await ensure_topics(broker, standard_topics(["load-encoder"]))
    ingest = IngestService(broker, IngestSettings(models_dir=models, queue_refresh_ms=200))
    worker = Worker(
        broker,
        WorkerSettings(model="load-encoder", tiers=["interactive", "batch"], models_dir=models),
    )
    await asyncio.gather(ingest.start(), worker.start())
    yield Stack(broker, models)
    await asyncio.gather(worker.stop(), ingest.stop())


async def publish_decision(bootstrap: str, sending: asyncio.Event, delay_s: float) -> None:
    """A scaler decision record, as the scaler writes it, a moment into the schedule."""
    await sending.wait()
    await asyncio.sleep(delay_s)
    record = {
        "schema_version": 1, "policy": "slo", "at": time.time(), "model": "load-encoder",
        "tier": "interactive", "group": GROUP, "current": 1, "desired": 2,
        "reasons": [{"code": "test", "message": "a test decision", "numbers": {}}],
        "diagnosis": "backlog", "applied": False, "error": "dry run",
        "signals": {"lag": 7, "ready_replicas": 1, "replicas": 1},
    }  # fmt: skip
    producer = make_producer(bootstrap)
    await producer.start()
    try:
        await producer.send_and_wait(DECISIONS, json.dumps(record).encode(), key=GROUP.encode())
    finally:
        await producer.stop()


async def test_every_request_is_accounted_for_and_the_stack_observed(stack: Stack) -> None:
    config = ModelRepository(stack.models).config("load-encoder")
    workload = rate_workload(30, 4, ["interactive", "batch"], tokens=24, seed=3)
    spec = LoadSpec(
        workload=workload,
        config=config,
        options=RunOptions(bootstrap=stack.bootstrap, grace_s=5.0),
        with_prediction=False,
    )
    sending = asyncio.Event()

    def on_status(status: Status) -> None:
        if status.stage == "sending":
            sending.set()

    decision = asyncio.create_task(publish_decision(stack.bootstrap, sending, 1.0))
    report = await asyncio.wait_for(run_load(spec, on_status), 90)
    await decision
    for tier in ("interactive", "batch"):
        summary = report["tiers"][tier]
        assert summary["sent"] == workload.tiers[tier].times.size  # type: ignore[index]
        assert (summary["ok"], summary["lost"], summary["errors"]) == (summary["sent"], 0, {})
        assert summary["stages_ms"]["infer"]["p50"] is not None
        assert summary["e2e_ms"]["p99"] is not None
    assert all(check["ok"] is not False for check in report["checks"])
    samples = report["replicas"]["series"][GROUP]
    assert samples and max(row[4] for row in samples) >= 1  # t, loading, warming, joining, ready
    [seen] = report["scaler"]["decisions"]
    assert (seen["desired"], seen["lag"]) == (2, 7)
    assert seen["line"] == "interactive 1→2 (backlog): a test decision"
    # Published >= 1.0 s after the stage turned to sending; the timeline starts 0.2 s after
    # that turn and t_s is rounded to 10 ms, so 0.8 itself is a legal reading.
    assert 0.8 <= seen["t_s"] < 4


async def test_a_tier_without_workers_is_refused_before_sending(stack: Stack) -> None:
    config = ModelRepository(stack.models).config("load-encoder")
    spec = LoadSpec(
        workload=rate_workload(5, 1, ["critical"], tokens=8),
        config=config,
        options=RunOptions(bootstrap=stack.bootstrap),
    )
    with pytest.raises(LoadError, match="no worker serves load-encoder on tier critical"):
        await asyncio.wait_for(run_load(spec), 30)


async def test_the_command_writes_its_report_and_timeline(stack: Stack, tmp_path: Path) -> None:
    args = [
        "load", "--rate", "20", "--duration", "3", "--model", "load-encoder", "--tokens", "16",
        "--models", str(stack.models), "--bootstrap", stack.bootstrap, "--out", str(tmp_path),
    ]  # fmt: skip
    # The command runs its own event loop: give it a thread of its own.
    result = await asyncio.to_thread(CliRunner().invoke, app, args)
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["totals"]["lost"] == 0 and report["totals"]["sent"] > 40
    assert report["prediction"]["tiers"]["interactive"]["unserved"] == 0
    assert (tmp_path / "timeline.png").stat().st_size > 10_000
    assert (tmp_path / "arrivals-interactive.csv").exists()
    assert "nothing lost" in result.stdout


async def test_a_missing_reply_topic_is_named_with_how_to_make_it(stack: Stack) -> None:
    config = ModelRepository(stack.models).config("load-encoder")
    spec = LoadSpec(
        workload=rate_workload(5, 1, ["interactive"], tokens=8),
        config=config,
        options=RunOptions(bootstrap=stack.bootstrap, reply_to="nosuch.topic"),
    )
    with pytest.raises(LoadError) as refused:
        await asyncio.wait_for(run_load(spec), 30)
    assert str(refused.value) == (
        f"the reply topic nosuch.topic does not exist at {stack.bootstrap}: create it "
        "(`inferbus topics create --reply-topic nosuch.topic`) or pass another --reply-to"
    )


async def test_ctrl_c_stops_sending_and_still_reports(stack: Stack, tmp_path: Path) -> None:
    """Ctrl-C used to exit 130 at once, with no summary and no report.json."""
    args = [
        sys.executable, "-m", "services.cli.main", "load", "--rate", "10", "--duration", "60",
        "--model", "load-encoder", "--tokens", "16", "--models", str(stack.models),
        "--bootstrap", stack.bootstrap, "--out", str(tmp_path), "--no-predict",
    ]  # fmt: skip
    load = await asyncio.create_subprocess_exec(
        *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    assert load.stderr is not None
    seen = b""
    while b"probing" not in seen:  # the bar's stage lines; sending follows the probe
        line = await asyncio.wait_for(load.stderr.readline(), 60)
        assert line, seen.decode()
        seen += line
    await asyncio.sleep(3.0)  # a few seconds of the schedule
    load.send_signal(signal.SIGINT)
    stdout, stderr = await asyncio.wait_for(load.communicate(), 30)
    output = stdout.decode() + (seen + stderr).decode()
    assert load.returncode == 130, output
    report = json.loads((tmp_path / "report.json").read_text())
    totals = report["totals"]
    assert report["interrupted_at_s"] is not None
    assert 0 < totals["sent"] < report["workload"]["requests"] / 2
    assert totals["lost"] == 0
    assert totals["answered"] + totals["pending"] == totals["sent"]
    assert "interrupted (Ctrl-C)" in stdout.decode()
    assert "Ctrl-C: sending stopped" in stderr.decode()


async def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = make_producer(bootstrap)
    await producer.start()
    try:
        for i, value in enumerate(values):
            await producer.send_and_wait(topic, value, partition=i % 2)
    finally:
        await producer.stop()


async def test_the_result_reader_reads_a_restarted_reply_log_from_its_start() -> None:
    """After the broker came back without its logs a run counted 288 answered requests
    lost: their results were on the new log, which ended before the reader's position."""
    topic = f"t-load-results-{uuid.uuid4().hex[:6]}"
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    seen: list[bytes] = []
    with EmbeddedBroker(port=0) as broker:
        await ensure_topics(broker.bootstrap, [TopicSpec(topic, 2)])
        await produce(broker.bootstrap, topic, [f"old-{i}".encode() for i in range(40)])
        consumer = make_consumer(bootstrap=broker.bootstrap, group_id=None, client_id="t-load")
        probe = LogEndProbe(broker.bootstrap, client_id="t-load")
        await consumer.start()
        reading: asyncio.Task[None] | None = None
        try:
            consumer.assign(tps)
            await consumer.seek_to_end(*tps)  # as a run starts: after every older result
            assert [await consumer.position(tp) for tp in tps] == [20, 20]
            reader = ResultReader(consumer, probe, seen.append, check_every_s=0.5)
            reading = asyncio.create_task(reader.run())
            await produce(broker.bootstrap, topic, [b"before-0", b"before-1"])

            await asyncio.to_thread(broker.restart)  # memory only: every log is gone
            await ensure_topics(broker.bootstrap, [TopicSpec(topic, 2)])
            await produce(broker.bootstrap, topic, [f"new-{i}".encode() for i in range(4)])

            deadline = time.monotonic() + 30
            while len(seen) < 6:
                assert time.monotonic() < deadline, f"the new log was not read: {seen}"
                await asyncio.sleep(0.2)
        finally:
            if reading is not None:
                reading.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await reading
            await probe.close()
            await consumer.stop()
    assert sorted(seen) == [b"before-0", b"before-1", b"new-0", b"new-1", b"new-2", b"new-3"]
    assert reader.restarts == 1 and sorted(reader.reread) == tps

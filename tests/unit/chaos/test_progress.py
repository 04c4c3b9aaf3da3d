"""What a scenario says while it runs (its own counts, not the probes', on stderr), and how
it stops on Ctrl-C."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from infra.tasks import cancel_and_wait
from services.chaos.harness import ChaosStack, StackPlan
from services.chaos.ledger import Seen, Sent
from services.chaos.model import SimModel
from services.chaos.scenarios import base
from services.chaos.scenarios.base import PROBE, Progress, Run


def sent(kind: str, request_id: str, *, accepted: bool = True) -> Sent:
    now = time.time()
    return Sent(kind, request_id, f"digest-{request_id}", now, now + 30, accepted)


def ok(request_id: str) -> Seen:
    return Seen("result", request_id, "ok", time.time())


def run_with(progress: Progress, sends: list[Sent], seen: list[Seen]) -> Run:
    stack: Any = None
    traffic: Any = SimpleNamespace(sent=sends, in_flight=1)
    observer: Any = SimpleNamespace(seen=seen)
    return Run("worker-kill", stack, traffic, observer, progress, time.monotonic())


async def test_the_ticker_counts_the_scenarios_events_not_the_probes() -> None:
    said: list[str] = []
    ticked = asyncio.Event()

    def progress(line: str) -> None:
        said.append(line)
        ticked.set()

    sends = [
        sent(PROBE, "p1"),
        sent(PROBE, "p2"),
        sent("valid", "a"),
        sent("valid", "b"),
        sent("valid", "c", accepted=False),
    ]
    run = run_with(progress, sends, [ok("p1"), ok("p2"), ok("a")])
    ticker = asyncio.create_task(run.ticker(every_s=0.01))
    await asyncio.wait_for(ticked.wait(), 5)
    await cancel_and_wait(ticker)
    # Before: "sent 3 outcomes: ok 3": the probes' answers beside the scenario's sends.
    assert said[0].endswith(
        "sent 3: ok 1 errors 0 dlq 0 late 0 waiting 1 not accepted 1; unacked 1"
    ), said[0]


def test_the_stacks_own_lines_go_to_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # stdout carries the reports only (`inferbus chaos > report.txt`).
    chaos = ChaosStack(StackPlan(SimModel()), tmp_path)
    chaos.stack.console.print("inferbus embedded broker on 127.0.0.1:1")
    out, err = capsys.readouterr()
    assert out == ""
    assert "embedded broker" in err


class _FakeStack:
    """A stack that records whether its task was still cancelling when it was closed."""

    closed_cancelling: list[int] = []

    def __init__(self, plan: StackPlan, workdir: Path) -> None:
        self.log_dir = workdir / "logs"

    async def start(self) -> str:
        return "127.0.0.1:1"

    async def close(self) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.closed_cancelling.append(task.cancelling())


class _FakeClient:
    def __init__(self, bootstrap: str) -> None:
        self.seen: list[Seen] = []

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass


async def test_ctrl_c_stops_the_stack_outside_the_cancelled_task(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A Kafka client's stop takes a cancellation for its caller's while its task is
    cancelling (`SecureConsumer.stop`): a stack closed in the Ctrl-C'd task stopped half-way
    and left ingest running. It is closed in a task of its own, and says what it had."""
    monkeypatch.setattr(base, "ChaosStack", _FakeStack)
    monkeypatch.setattr(base, "Observer", _FakeClient)
    monkeypatch.setattr(base, "RawProducer", _FakeClient)
    monkeypatch.setattr(base.tempfile, "mkdtemp", lambda prefix: str(tmp_path))
    _FakeStack.closed_cancelling.clear()
    said: list[str] = []
    running = asyncio.Event()

    async def scenario() -> None:
        async with base.running("worker-kill", StackPlan(SimModel()), said.append):
            running.set()
            await asyncio.sleep(3600)

    task = asyncio.create_task(scenario())
    await asyncio.wait_for(running.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert _FakeStack.closed_cancelling == [0]
    assert any("interrupted; had sent 0: ok 0" in line for line in said), said

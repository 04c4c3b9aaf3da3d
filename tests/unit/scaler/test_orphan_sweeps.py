"""OrphanSweeps: one sweep a group at a time, a failed one retried only after a pause and
said once, a stopped one cancelled, and whether the last one found nothing."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from scaler.orphan_sweeps import RETRY_AFTER_S, OrphanSweeps
from services.runtime.orphans import SweepCounts

G = "inferbus.workers.m.interactive"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Scripted:
    """Each call takes the next outcome: a count, or an exception to raise; `gate` holds
    every call until set."""

    def __init__(self, *outcomes: SweepCounts | Exception) -> None:
        self.outcomes = list(outcomes)
        self.calls = 0
        self.gate = asyncio.Event()
        self.gate.set()

    async def __call__(self, bootstrap: str, publisher: Any, **kw: Any) -> SweepCounts:
        self.calls += 1
        await self.gate.wait()
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome


def sweeps_of(sweep: Scripted, clock: Clock) -> OrphanSweeps:
    sweeps = OrphanSweeps("127.0.0.1:1", sweep=sweep, clock=clock)
    sweeps.bind(object())  # type: ignore[arg-type]
    return sweeps


def start(sweeps: OrphanSweeps) -> None:
    sweeps.ensure(G, topic="t", status="model_not_found", why="gone", queued=None)


async def ended(sweeps: OrphanSweeps) -> None:
    """Until the sweep ended and its done callback ran."""
    for _ in range(20):
        await asyncio.sleep(0)
        if not sweeps.running(G):
            break
    await asyncio.sleep(0)


async def test_one_sweep_a_group_at_a_time() -> None:
    sweep = Scripted(SweepCounts(2, 0))
    sweep.gate.clear()
    sweeps = sweeps_of(sweep, Clock())
    start(sweeps)
    start(sweeps)
    await asyncio.sleep(0)
    assert sweep.calls == 1 and sweeps.running(G)
    sweep.gate.set()
    await ended(sweeps)
    assert not sweeps.running(G) and not sweeps.found_nothing(G), "it answered 2"


async def test_a_failed_sweep_is_said_once_and_retried_only_after_a_pause(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    sweep = Scripted(OSError("broker away"), SweepCounts(0, 0))
    sweeps = sweeps_of(sweep, clock)
    with caplog.at_level(logging.ERROR, logger="scaler.orphan_sweeps"):
        start(sweeps)
        await ended(sweeps)
        clock.now += RETRY_AFTER_S - 1
        start(sweeps)
        await asyncio.sleep(0)
        assert sweep.calls == 1, "not before the pause"
        clock.now += 1
        start(sweeps)
        await ended(sweeps)
    assert sweep.calls == 2 and sweeps.found_nothing(G)
    assert caplog.text.count("event=orphans_failed") == 1
    assert "broker away" in caplog.text


async def test_stop_cancels_and_forgets() -> None:
    sweep = Scripted(SweepCounts(1, 0))
    sweep.gate.clear()
    sweeps = sweeps_of(sweep, Clock())
    start(sweeps)
    await asyncio.sleep(0)
    await sweeps.stop(G, "a worker is live")
    assert not sweeps.running(G) and not sweeps.found_nothing(G)
    await sweeps.close()


def test_a_sweep_needs_a_publisher() -> None:
    sweeps = OrphanSweeps("127.0.0.1:1", sweep=Scripted())
    with pytest.raises(RuntimeError, match="bind"):
        start(sweeps)

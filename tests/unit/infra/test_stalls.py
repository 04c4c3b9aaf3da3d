"""StallWatch names where a round that lasted too long is waiting."""

from __future__ import annotations

import asyncio
import logging

import pytest

from infra.stalls import StallWatch, await_chain


async def _parked(gate: asyncio.Event) -> None:
    await _inner(gate)


async def _inner(gate: asyncio.Event) -> None:
    await gate.wait()


async def test_the_chain_names_each_coroutine_the_task_waits_in() -> None:
    gate = asyncio.Event()
    task = asyncio.create_task(_parked(gate))
    await asyncio.sleep(0)

    names = [where.rsplit(" ", 1)[1] for where in await_chain(task)]

    assert names[:3] == ["_parked", "_inner", "wait"]
    gate.set()
    await task


async def test_a_round_past_its_bound_is_reported_once_with_where_it_waits(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    watch = StallWatch("poll", after_s=10.0, clock=lambda: now[0])
    gate = asyncio.Event()

    async def round_() -> None:
        watch.begin()
        try:
            await _inner(gate)
        finally:
            watch.end()

    task = asyncio.create_task(round_())
    await asyncio.sleep(0)
    now[0] = 9.0
    assert not watch.check()
    now[0] = 11.0
    with caplog.at_level(logging.WARNING, logger="infra.stalls"):
        assert watch.check()
        assert not watch.check(), "once a round"
    assert "event=stalled what=poll waited_s=11.0" in caplog.text
    assert "_inner" in caplog.text
    gate.set()
    await task
    now[0] = 30.0
    assert not watch.check(), "an ended round is not a stall"
    assert watch.stalls == 1

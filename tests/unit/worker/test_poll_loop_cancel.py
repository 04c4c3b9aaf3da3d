"""A worker's poll loop, held back by a full hand, ends when its stop cancels it, even as
an answer arrives in the same moment (Python 3.11's `asyncio.wait_for` dropped that
cancel: the loop ran on and the worker's stop waited for it for ever)."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.unit.worker.test_expiry import TOPIC, BusyHost, stalled_pipeline


class IdleConsumer:
    """Tends its membership; never polled while the hand is full."""

    def __init__(self) -> None:
        self.tended = 0

    async def tend(self) -> None:
        self.tended += 1

    async def poll(self, **_: Any) -> dict[Any, Any]:
        raise AssertionError("a full hand polls nothing")


async def test_a_held_back_poll_loop_ends_when_cancelled_as_an_answer_arrives() -> None:
    pipeline, *_ = stalled_pipeline(BusyHost())
    for offset in range(pipeline.settings.max_in_hand):
        pipeline.took(TOPIC, 0, offset)
    consumer = IdleConsumer()
    loop = asyncio.create_task(pipeline.poll_loop("batch", consumer))  # type: ignore[arg-type]
    await asyncio.sleep(0.25)  # 0.1 s waits for an answer, a tend after each
    assert consumer.tended, "the loop waits for answers, tending its consumer"
    pipeline.answered.set()
    await asyncio.sleep(0)  # the wait for an answer finishes in this turn...
    loop.cancel()  # ...and the stop's cancel lands in the same one
    done, _ = await asyncio.wait({loop}, timeout=2.0)
    assert loop in done and loop.cancelled(), "the poll loop ran on after its cancel"

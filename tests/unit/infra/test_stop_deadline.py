"""`StopDeadline`: a stop's steps share one limit, each cut short is said."""

from __future__ import annotations

import asyncio
import logging

import pytest

from infra.processes import StopDeadline


async def _never() -> None:
    await asyncio.Event().wait()


async def _cancel_ignored() -> None:
    """Work that takes its cancellation late (as a Kafka client's request may)."""
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        await asyncio.sleep(0.3)


async def test_steps_share_the_limit_and_a_cut_one_is_said(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger="infra.processes"):
        deadline = StopDeadline("probe", 0.2)
        assert await deadline.step("quick", asyncio.sleep(0), "nothing")
        assert not await deadline.step("slow", _never(), "the slow thing")
        assert not await deadline.step("after", _never(), "the next thing")
    assert deadline.gave_up == ["the slow thing", "the next thing"]
    assert "event=stopping service=probe limit_s=0" in caplog.text
    assert "step=slow" in caplog.text and "gave_up='the slow thing'" in caplog.text


async def test_a_step_of_its_own_most_ends_before_the_deadline() -> None:
    deadline = StopDeadline("probe", 10.0)
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert not await deadline.step("notice", _never(), "a notice", most_s=0.05)
    assert loop.time() - started < 0.5


async def test_work_that_takes_its_cancellation_late_does_not_hold_the_stop() -> None:
    deadline = StopDeadline("probe", 0.05)
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert not await deadline.step("stubborn", _cancel_ignored(), "stubborn work")
    assert loop.time() - started < 0.2


async def test_the_work_s_own_error_is_raised() -> None:
    async def fails() -> None:
        raise TimeoutError("its own")

    with pytest.raises(TimeoutError, match="its own"):
        await StopDeadline("probe", 1.0).step("failing", fails(), "nothing")


async def test_renew_gives_the_rest_a_fresh_share_never_past_the_limit() -> None:
    deadline = StopDeadline("probe", 0.1)
    deadline.renew(10.0)
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert not await deadline.step("slow", _never(), "slow")
    assert loop.time() - started < 0.5


async def _drops_its_cancel(released: asyncio.Event) -> None:
    while not released.is_set():
        try:
            await _naps()
        except asyncio.CancelledError:
            continue  # what a loop around 3.11's asyncio.wait_for could do


async def _naps() -> None:
    await asyncio.sleep(0.01)  # the line a stuck loop is named at


async def test_end_tasks_names_a_loop_that_does_not_end_and_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    released = asyncio.Event()
    ends = asyncio.create_task(_never(), name="ends")
    stuck = asyncio.create_task(_drops_its_cancel(released), name="stuck")
    await asyncio.sleep(0)
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        with caplog.at_level(logging.ERROR, logger="infra.processes"):
            deadline = StopDeadline("probe", 10.0)
            assert not await deadline.end_tasks("loops_end", [ends, stuck], most_s=0.1)
    finally:
        released.set()  # whatever is asserted below, the loop ends with the test
    assert loop.time() - started < 1.0
    assert ends.cancelled() and not stuck.done()
    await stuck
    assert "event=task_did_not_end service=probe task=stuck waiting_at=" in caplog.text
    line = _naps.__code__.co_firstlineno + 1
    assert f" > test_stop_deadline.py:{line} > tasks.py:" in caplog.text, caplog.text


async def test_end_tasks_of_loops_that_end_is_a_step_that_gives_up_nothing() -> None:
    deadline = StopDeadline("probe", 10.0)
    tasks = [asyncio.create_task(_never()) for _ in range(3)]
    await asyncio.sleep(0)
    assert await deadline.end_tasks("loops_end", tasks, most_s=1.0)
    assert all(task.cancelled() for task in tasks) and deadline.gave_up == []
    assert await deadline.end_tasks("none", [], most_s=1.0)

"""Waits with a time limit and task endings keep a cancellation (Python 3.11's
`asyncio.wait_for` drops one that lands as what it waits on finishes)."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from infra.tasks import cancel_and_wait, wait_ended, wait_event, within

ROOT = Path(__file__).parents[3]
PACKAGES = ("services", "scaler", "tracing", "infra", "schemas", "scripts")

Wait = Callable[[asyncio.Event], Awaitable[object]]


async def _within(event: asyncio.Event) -> object:
    return await within(event.wait(), 0.1)


async def _wait_event(event: asyncio.Event) -> object:
    return await wait_event(event, 0.1)


async def _looping(wait: Wait, event: asyncio.Event) -> str:
    for _ in range(50):  # 5 s of 0.1 s waits, if a cancel is dropped
        event.clear()
        with contextlib.suppress(TimeoutError):
            await wait(event)
    return "ran on after its cancel"


@pytest.mark.parametrize("wait", [_within, _wait_event], ids=["within", "wait_event"])
async def test_a_loop_cancelled_as_its_event_is_set_ends(wait: Wait) -> None:
    event = asyncio.Event()
    loop = asyncio.create_task(_looping(wait, event))
    await asyncio.sleep(0.01)
    event.set()
    await asyncio.sleep(0)  # what it waits on finishes in this turn...
    loop.cancel()  # ...and the cancel lands in the same one
    done, _ = await asyncio.wait({loop}, timeout=2.0)
    assert loop in done and loop.cancelled(), "the cancel was dropped"


@pytest.mark.parametrize(("set_after_s", "expected"), [(None, False), (0.01, True), (0.0, True)])
async def test_wait_event_says_whether_the_event_was_set(
    set_after_s: float | None, expected: bool
) -> None:
    event = asyncio.Event()
    if set_after_s == 0.0:
        event.set()
    elif set_after_s is not None:
        asyncio.get_running_loop().call_later(set_after_s, event.set)
    assert await wait_event(event, 0.1) is expected


async def test_within_returns_the_result_or_raises_timeout() -> None:
    assert await within(asyncio.sleep(0, result="answer"), 1.0) == "answer"
    with pytest.raises(TimeoutError):
        await within(asyncio.sleep(1.0), 0.01)


async def _slow_to_end() -> None:
    try:
        await asyncio.Event().wait()
    finally:
        await asyncio.sleep(0.2)  # cleans up after its cancel; the caller waits meanwhile


async def test_cancel_and_wait_raises_the_callers_own_cancellation() -> None:
    inner = asyncio.create_task(_slow_to_end())
    await asyncio.sleep(0)
    outer = asyncio.create_task(cancel_and_wait(inner))
    await asyncio.sleep(0.05)
    outer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await outer
    await asyncio.wait({inner})


async def test_wait_ended_takes_the_tasks_cancellation_and_raises_its_error() -> None:
    cancelled = asyncio.create_task(asyncio.Event().wait())
    await asyncio.sleep(0)
    cancelled.cancel()
    await wait_ended(cancelled)

    async def fails() -> None:
        raise ValueError("its own error")

    with pytest.raises(ValueError, match="its own error"):
        await wait_ended(asyncio.create_task(fails()))


DROPS_A_CANCEL = re.compile(
    r"\bwait_for\(|suppress\(asyncio\.CancelledError\)|except asyncio\.CancelledError:\s*pass"
)


def test_no_code_waits_with_what_can_drop_a_cancel() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, match.start()) + 1}: {match.group()}"
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        for text in [path.read_text()]
        for match in DROPS_A_CANCEL.finditer(text)
    ]
    assert found == [], (
        "asyncio.wait_for drops a cancel on Python 3.11, and a CancelledError suppressed "
        "may be the caller's own, not the awaited task's: use infra.tasks' within, "
        "wait_event, wait_ended or cancel_and_wait:\n" + "\n".join(found)
    )


async def test_cleanup_after_its_own_cancel_still_ends_the_tasks_it_awaits() -> None:
    """In a `finally` run because its task was cancelled, ending another task took that
    task's cancellation for the caller's own and raised: the cleanup stopped half way."""
    cleaned: list[str] = []

    async def owner() -> None:
        inner = asyncio.create_task(asyncio.Event().wait())
        try:
            await asyncio.Event().wait()
        finally:
            await cancel_and_wait(inner)
            cleaned.append("after the inner task")

    task = asyncio.create_task(owner())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cleaned == ["after the inner task"]

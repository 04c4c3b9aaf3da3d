"""Which event loop the services run on: uvloop when installed (the `fast` extra), else
asyncio's own. `INFERBUS_EVENT_LOOP=asyncio|uvloop|auto` (default auto) chooses."""

from __future__ import annotations

import asyncio
import importlib.util
import os
from collections.abc import Callable, Coroutine
from typing import Any, Literal, TypeVar

from schemas.errors import InferbusError

T = TypeVar("T")
LoopKind = Literal["asyncio", "uvloop"]
ENV = "INFERBUS_EVENT_LOOP"


class EventLoopError(InferbusError):
    """The event loop asked for cannot be used."""


def chosen_loop(setting: str | None = None) -> LoopKind:
    """The loop for `setting` (default: the environment), checked against what is installed."""
    value = (setting if setting is not None else os.environ.get(ENV, "auto")).strip().lower()
    has_uvloop = importlib.util.find_spec("uvloop") is not None
    if value in ("", "auto"):
        return "uvloop" if has_uvloop else "asyncio"
    if value == "asyncio":
        return "asyncio"
    if value == "uvloop":
        if not has_uvloop:
            raise EventLoopError(
                f"{ENV}=uvloop but uvloop is not installed; pip install 'inferbus[fast]'"
            )
        return "uvloop"
    raise EventLoopError(f"{ENV}={value!r}: choose asyncio, uvloop or auto")


def _factory(kind: LoopKind) -> Callable[[], asyncio.AbstractEventLoop] | None:
    if kind == "uvloop":
        import uvloop

        return uvloop.new_event_loop
    return None


def run(coro: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run` on the chosen loop."""
    with asyncio.Runner(loop_factory=_factory(chosen_loop())) as runner:
        return runner.run(coro)

"""INFERBUS_EVENT_LOOP picks the loop; asking for one that is not there is a clear error."""

from __future__ import annotations

import importlib.util

import pytest

from infra.eventloop import EventLoopError, chosen_loop, run

HAS_UVLOOP = importlib.util.find_spec("uvloop") is not None


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        pytest.param("asyncio", "asyncio", id="asyncio"),
        pytest.param("auto", "uvloop" if HAS_UVLOOP else "asyncio", id="auto"),
        pytest.param("", "uvloop" if HAS_UVLOOP else "asyncio", id="empty-is-auto"),
        pytest.param(
            " UVLOOP ",
            "uvloop",
            id="uvloop",
            marks=pytest.mark.skipif(not HAS_UVLOOP, reason="uvloop not installed"),
        ),
    ],
)
def test_chosen_loop(setting: str, expected: str) -> None:
    assert chosen_loop(setting) == expected


def test_an_unknown_loop_is_named() -> None:
    with pytest.raises(EventLoopError, match="INFERBUS_EVENT_LOOP='trio'"):
        chosen_loop("trio")


def test_run_returns_the_coroutines_result(monkeypatch: pytest.MonkeyPatch) -> None:
    async def answer() -> int:
        return 42

    monkeypatch.setenv("INFERBUS_EVENT_LOOP", "asyncio")
    assert run(answer()) == 42

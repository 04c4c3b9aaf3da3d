"""`inferbus load` shows progress when its output is a log or a pipe, not only on a terminal."""

from __future__ import annotations

import io

import pytest
from rich.console import Console
from rich.progress import Progress

from services.cli.load import PLAIN_LINE_EVERY_S, _Bar
from services.load.driver import Status


def _status(t_s: float, sent: int) -> Status:
    return Status(
        stage="sending",
        t_s=t_s,
        scheduled=100,
        sent=sent,
        answered=sent,
        errors=0,
        waiting=0,
        lost=0,
    )


@pytest.mark.parametrize(
    ("terminal", "expected_lines"),
    [(False, ["t=0s", "t=10s", "t=25s"]), (True, [])],
    ids=["piped-prints-lines", "terminal-draws-the-bar-only"],
)
def test_plain_lines_off_a_terminal(terminal: bool, expected_lines: list[str]) -> None:
    assert PLAIN_LINE_EVERY_S == 10.0  # the times below assume it
    out = io.StringIO()
    console = Console(file=out, force_terminal=terminal, width=200)
    bar = _Bar(Progress(console=console, auto_refresh=False))
    for t_s in (0.0, 0.5, 5.0, 10.0, 12.0, 25.0):
        bar(_status(t_s, int(t_s * 4)))
    lines = [line for line in out.getvalue().splitlines() if line.startswith("load sending")]
    assert [line.split()[2] for line in lines] == expected_lines
    if lines:
        assert lines[-1] == "load sending t=25s sent 100/100 answered 100 errors 0 waiting 0 lost 0"

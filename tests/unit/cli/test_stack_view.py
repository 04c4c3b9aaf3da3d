"""`inferbus up`'s view says when the stack is ready: every group that should run a worker
has one consuming."""

from __future__ import annotations

import pytest
from rich.console import Console

from scaler.collector.collector import GroupCollection
from scaler.decision import GroupDecision
from scaler.service import GroupView
from services.cli.stack import ready_message, stack_ready, status_line, status_table
from tests.unit.scaler.conftest import make_signals


def _view(group: str, ready: int | None, replicas: int = 1) -> GroupView:
    signals = (
        None
        if ready is None
        else make_signals(group=group, ready_replicas=ready, replicas=replicas)
    )
    return GroupView(GroupCollection(group, signals, 0), None, applied=False, error=None)


@pytest.mark.parametrize(
    ("groups", "ready"),
    [
        pytest.param({}, False, id="no-groups-yet"),
        pytest.param({"a": None}, False, id="no-signals-yet"),
        pytest.param({"a": (0, 1)}, False, id="worker-still-loading"),
        pytest.param({"a": (1, 1), "b": (0, 1)}, False, id="one-group-still-loading"),
        pytest.param({"a": (1, 1), "b": (2, 3)}, True, id="every-group-serving"),
        pytest.param(
            {"a": (1, 1), "b": (0, 0)}, True, id="a-group-scaled-to-zero-is-not-waited-for"
        ),
    ],
)
def test_stack_ready(groups: dict[str, tuple[int, int] | None], ready: bool) -> None:
    views = {
        g: _view(g, None) if v is None else _view(g, v[0], replicas=v[1]) for g, v in groups.items()
    }
    assert stack_ready(views) is ready


@pytest.mark.parametrize(
    ("groups", "said"),
    [
        pytest.param({"a": 1, "b": 2}, "ready: every group has a worker serving", id="all"),
        pytest.param(
            {"a": 1, "c": 0, "b": 0},
            "ready: every group with a worker has it serving; none for b, c (the scaler "
            "starts one when requests come)",
            id="scaled-to-zero-named",
        ),
    ],
)
def test_the_ready_message_names_groups_without_a_worker(groups: dict[str, int], said: str) -> None:
    views = {g: _view(g, n, replicas=n) for g, n in groups.items()}
    assert stack_ready(views)
    assert ready_message(views) == said


@pytest.mark.parametrize(
    ("acting", "starts"),
    [
        pytest.param(True, "interactive hold", id="scaler-on-says-what-it-did"),
        pytest.param(False, "scaler off, it would: interactive hold", id="no-scaler-advises"),
    ],
)
def test_a_status_line_says_whether_the_scaler_acts(acting: bool, starts: str) -> None:
    hold = GroupDecision(
        group="g", model="m", tier="interactive", current=1, desired=1, diagnosis="idle"
    )
    view = GroupView(_view("g", 1).collection, hold, applied=False, error=None)
    decision = status_line(view, acting=acting).split(" | ", 1)[1]
    assert decision.startswith(starts), decision


@pytest.mark.parametrize(
    ("width", "decisions_below"),
    [
        pytest.param(80, True, id="narrow-terminal-decisions-under-the-table"),
        pytest.param(160, False, id="wide-terminal-decision-column"),
    ],
)
def test_the_live_view_fits_its_terminal(width: int, decisions_below: bool) -> None:
    """At 80 columns ten columns folded every cell into strips; a narrow view keeps seven
    and prints each group's decision whole under the table."""
    hold = GroupDecision(
        group="inferbus.workers.demo-mlp.interactive",
        model="demo-mlp",
        tier="interactive",
        current=1,
        desired=1,
        diagnosis="idle",
    )
    collection = _view("inferbus.workers.demo-mlp.interactive", 1).collection
    views = {collection.group: GroupView(collection, hold, applied=False, error=None)}
    console = Console(width=width, record=True)
    console.print(status_table(views, "127.0.0.1:9092", 12, width=width))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= width
    whole_line = "demo-mlp.interactive: interactive hold"
    assert any(line.startswith(whole_line) for line in text.splitlines()) is decisions_below
    assert ("svc/s/rep" in text) is not decisions_below


def test_the_ready_message_does_not_promise_a_scaler_that_is_off() -> None:
    views = {"a": _view("a", 1), "b": _view("b", 0, replicas=0)}
    said = ready_message(views, acting=False)
    assert said.endswith("none for b (the scaler is off)"), said

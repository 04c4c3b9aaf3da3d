"""The runner: unknown names refused, a scenario that fails to run or hangs is reported."""

from __future__ import annotations

import asyncio

import pytest
from typer.testing import CliRunner

from services.chaos import runner
from services.chaos.harness import ChaosError
from services.chaos.ledger import Tally
from services.chaos.report import Check, ScenarioReport
from services.chaos.scenarios.base import Progress, ScenarioSpec
from services.cli.main import app


async def _fine(size: int, progress: Progress) -> ScenarioReport:
    progress(f"ran with {size}")
    return ScenarioReport("fine", "ok", Tally(sent=size, ok=size), 1.0, [], 0.1, "/logs")


async def _broken(size: int, progress: Progress) -> ScenarioReport:
    raise ChaosError("no worker to kill")


async def _hangs(size: int, progress: Progress) -> ScenarioReport:
    await asyncio.sleep(3600)
    raise AssertionError("unreachable")


@pytest.fixture
def scenarios(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = {
        "fine": ScenarioSpec("fine", "runs", 100, 5, _fine),
        "broken": ScenarioSpec("broken", "cannot set up", 1, 1, _broken),
        "hangs": ScenarioSpec("hangs", "never ends", 1, 1, _hangs),
    }
    monkeypatch.setattr(runner, "SCENARIOS", fake)
    monkeypatch.setattr(runner, "SHORT_LIMIT_S", 0.2)


@pytest.mark.usefixtures("scenarios")
async def test_short_sizes_and_failures_are_reported_in_order() -> None:
    said: list[str] = []
    reports = await runner.run_scenarios(
        ["fine", "broken", "hangs"], short=True, progress=said.append
    )
    assert [r.name for r in reports] == ["fine", "broken", "hangs"]
    assert reports[0].tally.sent == 5 and reports[0].passed
    assert "ran with 5" in said
    assert reports[1].failed() == [Check("scenario completed", False, "no worker to kill")]
    assert not reports[2].passed
    assert "did not finish within 0s" in reports[2].checks[0].detail


@pytest.mark.usefixtures("scenarios")
async def test_unknown_scenarios_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown scenario"):
        await runner.run_scenarios(["fine", "nope"], short=True, progress=print)


def test_the_command_refuses_an_unknown_scenario() -> None:
    result = CliRunner().invoke(app, ["chaos", "--scenario", "nope"])
    assert result.exit_code == 2
    assert "unknown scenario" in result.output

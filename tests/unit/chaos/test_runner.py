"""The runner: unknown names refused, a scenario that fails to run or hangs is reported."""

from __future__ import annotations

import asyncio
import json
import re
import signal
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path

import pytest
from aiokafka.errors import KafkaConnectionError
from click.testing import Result
from typer.testing import CliRunner

from infra.broker import BrokerError
from infra.processes import ChildProcess
from services.chaos import cli, runner
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


async def _raises(error: BaseException) -> ScenarioReport:
    raise error


@pytest.mark.parametrize(
    ("error", "detail"),
    [
        pytest.param(BrokerError("tansu did not answer"), "BrokerError: tansu did not answer"),
        pytest.param(KafkaConnectionError("refused"), "KafkaConnectionError: refused"),
        pytest.param(TimeoutError("no ack in 5s"), "TimeoutError: no ack in 5s"),
    ],
)
async def test_a_stack_error_is_reported_and_the_next_scenario_runs(
    monkeypatch: pytest.MonkeyPatch, error: BaseException, detail: str
) -> None:
    # Not the runner's limit: an error of the stack's own, with its words, not "did not
    # finish within"; and the run goes on (before: a KafkaError ended the whole run).
    fake = {
        "fails": ScenarioSpec("fails", "its stack fails", 1, 1, lambda *_: _raises(error)),
        "fine": ScenarioSpec("fine", "runs", 100, 5, _fine),
    }
    monkeypatch.setattr(runner, "SCENARIOS", fake)
    reports = await runner.run_scenarios(["fails", "fine"], short=True, progress=print)
    assert [r.name for r in reports] == ["fails", "fine"]
    assert reports[0].failed() == [Check("scenario completed", False, detail)]
    assert reports[1].passed


async def _interrupted(size: int, progress: Progress) -> ScenarioReport:
    """Ctrl-C in the middle of a scenario: the signal itself, to asyncio.run's handler."""
    progress("about to be interrupted")
    signal.raise_signal(signal.SIGINT)
    await asyncio.sleep(3600)
    raise AssertionError("unreachable")


def _invoke(*args: str) -> Result:
    return CliRunner().invoke(app, ["chaos", *args])


@pytest.fixture
def cli_scenarios(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Fake scenarios for the command; returns the names of the scenarios it started."""
    started: list[str] = []

    def spec(
        name: str, run: Callable[[int, Progress], Awaitable[ScenarioReport]]
    ) -> ScenarioSpec[int]:
        async def recorded(size: int, progress: Progress) -> ScenarioReport:
            started.append(name)
            report = await run(size, progress)
            return replace(report, name=name)

        return ScenarioSpec(name, "fake", 100, 5, recorded)

    fake = {"poison": spec("poison", _fine), "overload": spec("overload", _interrupted)}
    monkeypatch.setattr(runner, "SCENARIOS", fake)
    monkeypatch.setattr(cli, "SCENARIOS", fake)
    return started


def test_ctrl_c_reports_what_ran_writes_the_json_and_exits_130(
    cli_scenarios: list[str], tmp_path: Path
) -> None:
    out = tmp_path / "chaos.json"
    result = _invoke("-s", "poison", "-s", "overload", "--short", "--json", str(out))
    assert result.exit_code == 130, result.output
    assert cli_scenarios == ["poison", "overload"]
    assert "poison: sent 5 (accepted 5) ok 5" in result.output
    assert "interrupted (Ctrl-C)" in result.output
    written = json.loads(out.read_text())
    assert [r["scenario"] for r in written] == ["poison", "overload"]
    assert written[1]["checks"][0]["detail"].startswith("interrupted (Ctrl-C) after")


def test_a_repeated_scenario_is_a_usage_error(cli_scenarios: list[str]) -> None:
    result = _invoke("-s", "poison", "-s", "overload", "-s", "poison", "--short")
    assert result.exit_code == 2
    assert "--scenario" in result.output and "poison given more than once" in result.output
    assert cli_scenarios == []


@pytest.mark.parametrize(
    ("where", "says"),
    [
        pytest.param(".", "is a folder", id="a-folder"),
        pytest.param("a-file/chaos.json", "is a file, not a folder", id="under-a-file"),
    ],
)
def test_an_unusable_json_path_is_refused_before_any_scenario_runs(
    cli_scenarios: list[str], tmp_path: Path, where: str, says: str
) -> None:
    (tmp_path / "a-file").write_text("not a folder")
    result = _invoke("-s", "poison", "--short", "--json", str(tmp_path / where))
    assert result.exit_code == 2, result.output
    # The error panel wraps where the temporary path's length puts the line end (a short
    # one split "is a file, not a | folder" in CI): read it as one line.
    said = " ".join(re.sub("[│╭╮╰╯─]", " ", result.output).split())
    assert "--json" in said and says in said, result.output
    assert cli_scenarios == []


def test_a_json_path_in_a_new_folder_is_made(cli_scenarios: list[str], tmp_path: Path) -> None:
    out = tmp_path / "new" / "folder" / "chaos.json"
    result = _invoke("-s", "poison", "--short", "--json", str(out))
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())[0]["scenario"] == "poison"


async def _long_detail(size: int, progress: Progress) -> ScenarioReport:
    detail = "a check's detail as long as the broker-restart ones " * 6
    return ScenarioReport("poison", "ok", Tally(), None, [Check("x", True, detail)], 0.1, "/l")


def test_a_long_check_stays_on_one_line_in_a_pipe(
    monkeypatch: pytest.MonkeyPatch, cli_scenarios: list[str]
) -> None:
    fake = {"poison": ScenarioSpec("poison", "fake", 1, 1, _long_detail)}
    monkeypatch.setattr(runner, "SCENARIOS", fake)
    monkeypatch.setattr(cli, "SCENARIOS", fake)
    result = _invoke("-s", "poison")
    assert result.exit_code == 0, result.output
    detail = "a check's detail as long as the broker-restart ones " * 6
    assert any(f"[met] x: {detail.strip()}" in line for line in result.output.splitlines())


async def _stops_slowly_then_ctrl_c_again(size: int, progress: Progress) -> ScenarioReport:
    """A scenario whose stack outlives the command unless killed: its orderly stop is slow
    (a broker that is down), and a second Ctrl-C comes while it stops."""
    child = ChildProcess("slow-ingest", ["sleep", "60"])
    child.start()
    _children.append(child)
    try:
        signal.raise_signal(signal.SIGINT)
        await asyncio.sleep(3600)
    finally:
        asyncio.get_running_loop().call_soon(signal.raise_signal, signal.SIGINT)
        await asyncio.sleep(30)  # the stop, cut short by the second Ctrl-C
    raise AssertionError("unreachable")


_children: list[ChildProcess] = []


def test_a_second_ctrl_c_kills_what_the_stop_left_running(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = {"poison": ScenarioSpec("poison", "fake", 1, 1, _stops_slowly_then_ctrl_c_again)}
    monkeypatch.setattr(runner, "SCENARIOS", fake)
    monkeypatch.setattr(cli, "SCENARIOS", fake)
    try:
        result = _invoke("-s", "poison")
        assert result.exit_code == 130, result.output
        [child] = _children
        assert child.process is not None
        assert child.process.wait(timeout=5) == -signal.SIGKILL
        assert "killed 1 process group(s)" in result.output
    finally:
        for child in _children:
            child.stop(timeout_s=1)
        _children.clear()

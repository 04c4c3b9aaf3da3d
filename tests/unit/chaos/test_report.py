"""Reports as JSON, lines and a table."""

from __future__ import annotations

import json
import math

import pytest
from rich.console import Console

from services.chaos.ledger import Tally
from services.chaos.report import Check, ScenarioReport, lines, table


def report(*checks: Check) -> ScenarioReport:
    return ScenarioReport(
        name="worker-kill",
        summary="kill it",
        tally=Tally(
            sent=10, ok=7, errors={"rejected_overload": 2}, lost=1, duplicates=3, conflicts=2
        ),
        recover_s=6.789,
        checks=list(checks),
        duration_s=12.34,
        log_dir="/tmp/logs",
        phases={"after": Tally(sent=4, ok=3, lost=1)},
        extras={"p99_ms": math.inf, "nested": {"x": [1.23456, math.nan]}},
    )


def test_passed_only_when_every_check_is_met() -> None:
    met, missed = Check("a", True, "fine"), Check("b", False, "not fine")
    assert report(met).passed
    assert not report(met, missed).passed
    assert report(met, missed).failed() == [missed]


@pytest.mark.parametrize(
    ("missed", "correct"),
    [
        pytest.param(Check("b", False, "no"), False, id="plain-target-is-asserted"),
        pytest.param(Check("p99", False, "slow", host_speed=True), True, id="host-speed-reported"),
        pytest.param(
            Check("0 lost", False, "3 lost", broker_defect="phantom acks"),
            True,
            id="broker-defect-reported",
        ),
    ],
)
def test_correct_asserts_all_but_latency_and_broker_defects(missed: Check, correct: bool) -> None:
    result = report(Check("a", True, "fine"), missed)
    assert not result.passed
    assert result.correct() is correct


def test_json_has_the_counts_and_no_infinity() -> None:
    out = report(Check("0 lost", False, "1 of 10 lost")).to_json()
    text = json.dumps(out, allow_nan=False)  # raises on inf or nan
    assert json.loads(text)["extras"] == {"p99_ms": None, "nested": {"x": [1.235, None]}}
    assert (out["sent"], out["ok"], out["lost"], out["duplicates"]) == (10, 7, 1, 3)
    assert out["errors"] == {"rejected_overload": 2}
    assert out["recover_s"] == 6.79 and out["passed"] is False
    assert out["phases"]["after"]["lost"] == 1


def test_lines_say_which_target_was_missed() -> None:
    text = "\n".join(lines(report(Check("0 lost", False, "1 of 10 lost"))))
    assert "rejected_overload 2" in text
    assert "[MISSED] 0 lost: 1 of 10 lost" in text
    assert "phase after:" in text


def test_table_has_a_row_per_scenario() -> None:
    console = Console(width=200, record=True)
    console.print(table([report(Check("0 lost", False, "x")), report(Check("y", True, "z"))]))
    text = console.export_text()
    assert text.count("worker-kill") == 2
    assert "MISSED: 0 lost" in text and "met" in text and "6.8s" in text
    assert "3 (2 differ)" in text

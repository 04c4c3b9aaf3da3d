"""`inferbus chaos`: the command, its progress lines, the table and the JSON file."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from infra.processes import kill_children
from services.chaos.report import ScenarioReport, lines, table
from services.chaos.runner import run_scenarios, unknown
from services.chaos.scenarios import SCENARIOS
from services.cli.common import check_output, setup_logging

TABLE_WIDTH = 160
"""Output width when it goes to a file or a pipe (rich assumes 80 there)."""
INTERRUPTED = 130
"""Exit code after Ctrl-C (128 + SIGINT), as the other commands use."""
console = Console(width=None if sys.stdout.isatty() else TABLE_WIDTH)
progress_console = Console(stderr=True, soft_wrap=True)


def _progress(message: str) -> None:
    progress_console.print(f"[dim]chaos[/dim] {escape(message)}", highlight=False)


def _check_names(names: Sequence[str]) -> None:
    """Usage errors (exit 2) for a name that is not a scenario, or one given twice."""
    missing = unknown(names)
    if missing:
        raise typer.BadParameter(
            f"unknown scenario(s) {', '.join(missing)}; choose from {', '.join(SCENARIOS)}",
            param_hint="'--scenario'",
        )
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise typer.BadParameter(
            f"{', '.join(repeated)} given more than once; each scenario runs once per command",
            param_hint="'--scenario'",
        )


def _kill_what_is_left() -> None:
    """After Ctrl-C: a second one cuts the stack's orderly stop short (as under `inferbus
    up`, it means "stop at once"); SIGKILL whatever it left running (an ingest draining
    into a broker that is down outlived the command). Nothing is left after one Ctrl-C."""
    killed = kill_children()
    if killed:
        _progress(f"stopped at once: killed {len(killed)} process group(s), nothing drained")


def _show(reports: Sequence[ScenarioReport]) -> None:
    for report in reports:
        # soft_wrap: a check's detail stays on its line in a file or pipe (grep, diff).
        console.print("\n".join(lines(report)), markup=False, highlight=False, soft_wrap=True)
    console.print(table(reports))


def chaos_command(
    scenario: Annotated[
        list[str] | None,
        typer.Option(
            "--scenario",
            "-s",
            metavar="NAME",
            help=f"Scenario to run (repeatable; default all): {', '.join(SCENARIOS)}.",
        ),
    ] = None,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Write every report as JSON here.")
    ] = None,
    short: Annotated[
        bool, typer.Option(help="A few seconds of load per scenario (as the test suite runs).")
    ] = False,
) -> None:
    """Faults against the embedded stack, every request id accounted for (exit 1: a target
    missed; 130: Ctrl-C, after the reports of what ran)."""
    names = scenario or list(SCENARIOS)
    _check_names(names)
    check_output(json_out, "--json")
    setup_logging("WARNING")
    # The harness's own clients retry through faults on purpose; aiokafka would log every
    # refused connection. Each service's log is in the log folder its report names.
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    reports: list[ScenarioReport] = []
    interrupted = False
    try:
        asyncio.run(run_scenarios(names, short=short, progress=_progress, into=reports))
    except KeyboardInterrupt:
        interrupted = True
        _kill_what_is_left()
        ran = ", ".join(r.name for r in reports) or "none"
        _progress(f"interrupted (Ctrl-C); reported below: {ran}")
    _show(reports)
    if json_out is not None:
        json_out.write_text(json.dumps([r.to_json() for r in reports], indent=2) + "\n")
        _progress(f"wrote {json_out}")
    if interrupted:
        raise typer.Exit(INTERRUPTED)
    raise typer.Exit(0 if all(report.passed for report in reports) else 1)

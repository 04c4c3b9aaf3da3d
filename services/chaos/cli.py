"""`inferbus chaos`: the command, its progress lines, the table and the JSON file."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from services.chaos.report import lines, table
from services.chaos.runner import run_scenarios, unknown
from services.chaos.scenarios import SCENARIOS
from services.cli.common import setup_logging

TABLE_WIDTH = 160
"""Output width when it goes to a file or a pipe (rich assumes 80 there)."""
console = Console(width=None if sys.stdout.isatty() else TABLE_WIDTH)
progress_console = Console(stderr=True, soft_wrap=True)


def _progress(message: str) -> None:
    progress_console.print(f"[dim]chaos[/dim] {escape(message)}", highlight=False)


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
    missed)."""
    names = scenario or list(SCENARIOS)
    missing = unknown(names)
    if missing:
        raise typer.BadParameter(
            f"unknown scenario(s) {', '.join(missing)}; choose from {', '.join(SCENARIOS)}"
        )
    setup_logging("WARNING")
    # The harness's own clients retry through faults on purpose; aiokafka would log every
    # refused connection. Each service's log is in the log folder its report names.
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    reports = asyncio.run(run_scenarios(names, short=short, progress=_progress))
    for report in reports:
        console.print("\n".join(lines(report)), markup=False, highlight=False)
    console.print(table(reports))
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps([r.to_json() for r in reports], indent=2) + "\n")
        _progress(f"wrote {json_out}")
    raise typer.Exit(0 if all(report.passed for report in reports) else 1)

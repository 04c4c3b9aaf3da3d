"""Runs scenarios one after another, each bounded in time, into reports."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence

from services.chaos.harness import ChaosError
from services.chaos.ledger import Tally
from services.chaos.report import Check, ScenarioReport
from services.chaos.scenarios import SCENARIOS
from services.chaos.scenarios.base import Progress

log = logging.getLogger(__name__)
LIMIT_S = 600.0
"""No default scenario comes near this; a stack that hangs must not hang the run."""
SHORT_LIMIT_S = 240.0


def unknown(names: Sequence[str]) -> list[str]:
    """Names that are not scenarios."""
    return [name for name in names if name not in SCENARIOS]


def _aborted(name: str, started: float, reason: str) -> ScenarioReport:
    """The report of a scenario that could not finish: its one check says why."""
    return ScenarioReport(
        name=name,
        summary=SCENARIOS[name].summary,
        tally=Tally(),
        recover_s=None,
        checks=[Check("scenario completed", False, reason)],
        duration_s=time.monotonic() - started,
        log_dir="",
    )


async def run_scenarios(
    names: Sequence[str], *, short: bool, progress: Progress
) -> list[ScenarioReport]:
    """Each named scenario on a fresh stack, in turn.

    A scenario that cannot set up its fault, or outlives its limit, is reported as not
    completed (with the reason) and the next one runs.
    """
    missing = unknown(names)
    if missing:
        raise ValueError(f"unknown scenario(s): {', '.join(missing)}")
    limit = SHORT_LIMIT_S if short else LIMIT_S
    reports: list[ScenarioReport] = []
    for name in names:
        spec = SCENARIOS[name]
        started = time.monotonic()
        progress(f"{name}: {spec.summary}{' (short)' if short else ''}")
        try:
            async with asyncio.timeout(limit):
                report = await spec.start(short=short, progress=progress)
        except TimeoutError:
            report = _aborted(name, started, f"did not finish within {limit:.0f}s")
        except ChaosError as exc:
            report = _aborted(name, started, str(exc))
        reports.append(report)
        log.info("event=chaos_scenario_done scenario=%s passed=%s", name, report.passed)
    return reports

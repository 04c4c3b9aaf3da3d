"""Runs scenarios one after another, each bounded in time, into reports."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence

from aiokafka.errors import KafkaError

from schemas.errors import InferbusError
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


def _why(exc: BaseException) -> str:
    """A harness or stack error, for a check's detail: the ChaosError's own words, else
    the error's type (once: aiokafka's errors name it themselves) and message."""
    text, kind = str(exc), type(exc).__name__
    if isinstance(exc, ChaosError) or text.startswith(kind):
        return text
    return f"{kind}: {text}" if text else kind


async def run_scenarios(
    names: Sequence[str],
    *,
    short: bool,
    progress: Progress,
    into: list[ScenarioReport] | None = None,
) -> list[ScenarioReport]:
    """Each named scenario on a fresh stack, in turn; each report is appended to `into`
    (a new list by default) as it is made, and the list returned.

    A scenario that cannot set up its fault or its stack (an inferbus or Kafka error), or
    outlives its limit, is reported as not completed (with the reason) and the next one
    runs. One cancelled (Ctrl-C) is reported as interrupted, and the cancellation goes on:
    `into` then holds what ran.
    """
    missing = unknown(names)
    if missing:
        raise ValueError(f"unknown scenario(s): {', '.join(missing)}")
    limit = SHORT_LIMIT_S if short else LIMIT_S
    reports = [] if into is None else into
    for name in names:
        spec = SCENARIOS[name]
        started = time.monotonic()
        progress(f"{name}: {spec.summary}{' (short)' if short else ''}")
        try:
            async with asyncio.timeout(limit) as bound:
                report = await spec.start(short=short, progress=progress)
        except TimeoutError as exc:
            reason = f"did not finish within {limit:.0f}s" if bound.expired() else _why(exc)
            report = _aborted(name, started, reason)
        except (InferbusError, KafkaError) as exc:
            report = _aborted(name, started, _why(exc))
        except asyncio.CancelledError:
            took = time.monotonic() - started
            reports.append(_aborted(name, started, f"interrupted (Ctrl-C) after {took:.0f}s"))
            raise
        reports.append(report)
        log.info("event=chaos_scenario_done scenario=%s passed=%s", name, report.passed)
    return reports

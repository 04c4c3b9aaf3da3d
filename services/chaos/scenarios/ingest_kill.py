"""ingest-kill: `kill -9` the ingest process under load; the stack must restart it unaided."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from schemas.topics import Tier, ingest_topic
from services.chaos.events import valid
from services.chaos.harness import ChaosError, StackPlan, started_at
from services.chaos.ledger import tally, tally_by
from services.chaos.measures import first_ok_sent_after
from services.chaos.model import SimModel
from services.chaos.report import Check, ScenarioReport
from services.chaos.scenarios.base import Progress, ScenarioSpec, running, stack_checks

NAME = "ingest-kill"
SUMMARY = "kill -9 ingest under load, no hand help"
TIER: Tier = "interactive"


@dataclass(frozen=True)
class Sizes:
    rate_rps: float
    duration_s: float
    kill_at_s: float
    timeout_s: float
    """Each request's deadline, seconds after it is sent."""


DEFAULT = Sizes(rate_rps=40, duration_s=60, kill_at_s=10, timeout_s=30)
SHORT = Sizes(rate_rps=20, duration_s=12, kill_at_s=3, timeout_s=15)
PLAN = StackPlan(SimModel(), tiers=(TIER,), with_scaler=True)


async def run(sizes: Sizes, progress: Progress) -> ScenarioReport:
    started = time.monotonic()
    async with running(NAME, PLAN, progress) as r:
        await r.warm(TIER)
        killed_at: float | None = None
        load = asyncio.create_task(
            r.traffic.paced(
                lambda: valid(tier=TIER, deadline_s=time.time() + sizes.timeout_s),
                ingest_topic(TIER),
                rate_rps=sizes.rate_rps,
                duration_s=sizes.duration_s,
                phase=lambda: "before" if killed_at is None else "after",
            )
        )
        await asyncio.sleep(sizes.kill_at_s)
        pids = r.stack.ingest_pids()
        if not pids:
            load.cancel()
            raise ChaosError(f"ingest is not running, nothing to kill; see {r.log_dir}")
        pid = pids[0]
        killed_at = time.time()
        r.stack.kill(pid)
        r.say(f"killed ingest pid {pid} with SIGKILL")
        await load
        await r.settle()
        fates = r.fates()
        new_pid = next((p for p in r.stack.ingest_pids() if p != pid), None)
        spawned = started_at(new_pid) if new_pid is not None else None
    recover = first_ok_sent_after(fates, killed_at)
    total = tally(fates)
    return ScenarioReport(
        name=NAME,
        summary=SUMMARY,
        tally=total,
        recover_s=recover,
        checks=[
            Check(
                "a new ingest routes again",
                recover is not None,
                "first ok for a request sent after the kill: "
                + ("never" if recover is None else f"{recover:.1f}s after it"),
            ),
            Check("0 lost", total.lost == 0, f"{total.lost} of {total.accepted} accepted lost"),
            *stack_checks(r),
        ],
        duration_s=time.monotonic() - started,
        log_dir=r.log_dir,
        phases=tally_by(fates, lambda f: f.sent.phase),
        extras={
            "killed_pid": pid,
            "new_ingest_pid": new_pid,
            "new_ingest_started_after_kill_s": (
                spawned - killed_at if spawned is not None else None
            ),
        },
    )


SPEC = ScenarioSpec(NAME, SUMMARY, DEFAULT, SHORT, run)

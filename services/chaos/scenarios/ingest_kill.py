"""ingest-kill: `kill -9` the ingest process under load; the stack must restart it unaided."""

from __future__ import annotations

from schemas.topics import Tier
from services.chaos.harness import StackPlan, started_at
from services.chaos.ledger import tally, tally_by
from services.chaos.measures import first_ok_sent_after
from services.chaos.model import SimModel
from services.chaos.report import Check, ScenarioReport
from services.chaos.scenarios.base import Progress, ScenarioSpec, running
from services.chaos.scenarios.checks import first_ok_after, none_lost
from services.chaos.scenarios.kill import KillSizes, kill_under_load

NAME = "ingest-kill"
SUMMARY = "kill -9 ingest under load, no hand help"
TIER: Tier = "interactive"

DEFAULT = KillSizes(rate_rps=40, duration_s=60, kill_at_s=10, timeout_s=30)
SHORT = KillSizes(rate_rps=20, duration_s=12, kill_at_s=3, timeout_s=15)
PLAN = StackPlan(SimModel(), tiers=(TIER,), with_scaler=True)


async def run(sizes: KillSizes, progress: Progress) -> ScenarioReport:
    async with running(NAME, PLAN, progress) as r:
        await r.warm(TIER)
        kill = await kill_under_load(
            r,
            TIER,
            sizes,
            what="ingest",
            pids=r.stack.ingest_pids,
            missing="ingest is not running, nothing to kill",
        )
        pid, killed_at = kill.pid, kill.at_s
        await r.settle()
        fates = r.fates()
        new_pid = next((p for p in r.stack.ingest_pids() if p != pid), None)
        spawned = started_at(new_pid) if new_pid is not None else None
    recover = first_ok_sent_after(fates, killed_at)
    total = tally(fates)
    return r.report(
        summary=SUMMARY,
        tally=total,
        recover_s=recover,
        checks=[
            Check(
                "a new ingest routes again",
                recover is not None,
                first_ok_after("kill", recover),
            ),
            none_lost(total),
        ],
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

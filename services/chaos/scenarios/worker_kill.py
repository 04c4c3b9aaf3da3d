"""worker-kill: `kill -9` the only worker under load; the stack must replace it unaided."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from schemas.topics import Tier, ingest_topic
from services.chaos.events import valid
from services.chaos.harness import ChaosError, StackPlan, started_at
from services.chaos.ledger import tally
from services.chaos.measures import first_ok
from services.chaos.model import SimModel
from services.chaos.report import Check, ScenarioReport
from services.chaos.scenarios.base import Progress, ScenarioSpec, running, stack_checks

NAME = "worker-kill"
SUMMARY = "kill -9 the worker under load, scaler on, no hand help"
TIER: Tier = "interactive"
SLACK_S = 5.0
"""The target: a replacement serves within the measured time-to-ready plus this."""


@dataclass(frozen=True)
class Sizes:
    rate_rps: float
    duration_s: float
    kill_at_s: float
    timeout_s: float
    """Each request's deadline, seconds after it is sent."""


DEFAULT = Sizes(rate_rps=40, duration_s=60, kill_at_s=10, timeout_s=30)
SHORT = Sizes(rate_rps=20, duration_s=12, kill_at_s=3, timeout_s=25)
PLAN = StackPlan(SimModel(max_replicas=1), tiers=(TIER,), with_scaler=True)
"""One worker at most: the scaler can only replace the killed one, not add another."""


async def run(sizes: Sizes, progress: Progress) -> ScenarioReport:
    started = time.monotonic()
    async with running(NAME, PLAN, progress) as r:
        warm_s = await r.warm(TIER)
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
        pids = r.stack.worker_pids(TIER)
        if not pids:
            load.cancel()
            raise ChaosError(f"no {TIER} worker is running to kill; see {r.log_dir}")
        before = {s.worker_id for s in r.observer.seen if s.worker_id is not None}
        killed_at = time.time()
        r.stack.kill(pids[0])
        r.say(f"killed worker pid {pids[0]} with SIGKILL")
        await load
        await r.settle()
        fates = r.fates()
        first = first_ok(r.observer.seen, killed_at, where=lambda s: s.worker_id not in before)
        # One worker at most: whatever runs now, other than the killed one, replaced it.
        replacements = [pid for pid in r.stack.worker_pids(TIER) if pid != pids[0]]
        replacement = started_at(replacements[0]) if replacements else None
        registry_ready_s = r.stack.time_to_ready_s(TIER)
        workers_now = r.stack.worker_pids(TIER)
    recover = first.at_s - killed_at if first is not None else None
    # The bound's time-to-ready is the replacement's own, process start to first result:
    # the registry's figure starts at the worker module's import, after the interpreter.
    if first is not None and replacement is not None:
        ready_s = first.at_s - replacement
        ready_source = "the replacement's process start to its first result"
    else:
        ready_s = warm_s
        ready_source = "the stack's start to its first result (no replacement served)"
    total = tally(fates)
    bound = ready_s + SLACK_S
    return ScenarioReport(
        name=NAME,
        summary=SUMMARY,
        tally=total,
        recover_s=recover,
        checks=[
            Check(
                "replaced within time-to-ready + 5 s",
                recover is not None and recover <= bound,
                f"first ok from a new worker {_seconds(recover)} after the kill; "
                f"bound {bound:.1f}s from {ready_source}",
            ),
            Check("0 lost", total.lost == 0, f"{total.lost} of {total.accepted} accepted lost"),
            *stack_checks(r),
        ],
        duration_s=time.monotonic() - started,
        log_dir=r.log_dir,
        phases={
            phase: tally(f for f in fates if f.sent.phase == phase) for phase in ("before", "after")
        },
        extras={
            "killed_pid": pids[0],
            "replacement_spawned_after_kill_s": (
                replacement - killed_at if replacement is not None else None
            ),
            "replacement_time_to_ready_s": ready_s if replacement is not None else None,
            "registry_time_to_ready_s": registry_ready_s,
            "warm_s": warm_s,
            "workers_at_end": len(workers_now),
        },
    )


def _seconds(value: float | None) -> str:
    return "never" if value is None else f"{value:.1f}s"


SPEC = ScenarioSpec(NAME, SUMMARY, DEFAULT, SHORT, run)

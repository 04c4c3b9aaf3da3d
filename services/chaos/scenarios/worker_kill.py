"""worker-kill: `kill -9` the only worker under load; the stack must replace it unaided."""

from __future__ import annotations

from schemas.topics import Tier
from services.chaos.harness import StackPlan, started_at
from services.chaos.ledger import tally
from services.chaos.measures import first_ok
from services.chaos.model import SimModel
from services.chaos.report import Check, ScenarioReport
from services.chaos.scenarios.base import Progress, ScenarioSpec, running
from services.chaos.scenarios.checks import none_lost
from services.chaos.scenarios.kill import KillSizes, kill_under_load

NAME = "worker-kill"
SUMMARY = "kill -9 the worker under load, scaler on, no hand help"
TIER: Tier = "interactive"
SLACK_S = 5.0
"""The target: a replacement serves within the measured time-to-ready plus this."""

DEFAULT = KillSizes(rate_rps=40, duration_s=60, kill_at_s=10, timeout_s=30)
SHORT = KillSizes(rate_rps=20, duration_s=12, kill_at_s=3, timeout_s=25)
PLAN = StackPlan(SimModel(max_replicas=1), tiers=(TIER,), with_scaler=True)
"""One worker at most: the scaler can only replace the killed one, not add another."""


async def run(sizes: KillSizes, progress: Progress) -> ScenarioReport:
    async with running(NAME, PLAN, progress) as r:
        warm_s = await r.warm(TIER)
        kill = await kill_under_load(
            r,
            TIER,
            sizes,
            what="worker",
            pids=lambda: r.stack.worker_pids(TIER),
            missing=f"no {TIER} worker is running to kill",
        )
        killed_at = kill.at_s
        await r.settle()
        fates = r.fates()
        first = first_ok(
            r.observer.seen, killed_at, where=lambda s: s.worker_id not in kill.workers_before
        )
        # One worker at most: whatever runs now, other than the killed one, replaced it.
        replacements = [pid for pid in r.stack.worker_pids(TIER) if pid != kill.pid]
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
    return r.report(
        summary=SUMMARY,
        tally=total,
        recover_s=recover,
        checks=[
            Check(
                "replaced within time-to-ready + 5 s",
                recover is not None and recover <= bound,
                f"first ok from a new worker {_seconds(recover)} after the kill; "
                f"bound {bound:.1f}s from {ready_source}"
                + _spawn_note(replacement, killed_at, ready_s),
            ),
            none_lost(total),
        ],
        phases={
            phase: tally(f for f in fates if f.sent.phase == phase) for phase in ("before", "after")
        },
        extras={
            "killed_pid": kill.pid,
            "replacement_spawned_after_kill_s": (
                replacement - killed_at if replacement is not None else None
            ),
            "replacement_time_to_ready_s": ready_s if replacement is not None else None,
            "registry_time_to_ready_s": registry_ready_s,
            "warm_s": warm_s,
            "workers_at_end": len(workers_now),
        },
    )


def _spawn_note(replacement: float | None, killed_at: float, ready_s: float) -> str:
    """What the bound comes to when the replacement served: its start within the 5 s of
    slack after the kill (detection and spawn), its own time-to-ready on top."""
    if replacement is None:
        return ""
    return (
        f" (started {replacement - killed_at:.1f}s after the kill, serving {ready_s:.1f}s "
        "after its start)"
    )


def _seconds(value: float | None) -> str:
    return "never" if value is None else f"{value:.1f}s"


SPEC = ScenarioSpec(NAME, SUMMARY, DEFAULT, SHORT, run)

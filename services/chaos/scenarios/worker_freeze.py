"""worker-freeze: SIGSTOP one of two workers under load, then SIGCONT it.

A hung engine, a long pause or a frozen VM looks like this: the process holds its
partitions and its connections, but neither reads nor renews its registry lease. Its lease
lapses (`INFERBUS_WORKER_LEASE_S`), the other worker takes its partitions and answers what
the frozen one had polled and not committed; once it goes on, it finds its lease lapsed,
lets go of what it held (fencing) and joins again by handover."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from schemas.topics import Tier
from services.chaos.harness import ChaosError, StackPlan
from services.chaos.ledger import Fate, tally
from services.chaos.measures import first_ok
from services.chaos.model import SimModel
from services.chaos.report import Check, ScenarioReport
from services.chaos.scenarios.base import Progress, ScenarioSpec, running
from services.chaos.scenarios.checks import none_lost
from services.worker.settings import WorkerSettings

NAME = "worker-freeze"
SUMMARY = "freeze one of two workers (SIGSTOP) under load, then let it go on"
TIER: Tier = "interactive"
PLAN = StackPlan(SimModel(max_replicas=2), tiers=(TIER,), with_scaler=False, workers=2)
SLACK_S = 5.0
"""The target: a request sent while a worker is frozen is answered within the lease plus
this (the other worker sees the lapse, takes the partitions, reads them from the commit)."""


@dataclass(frozen=True)
class Sizes:
    rate_rps: float
    duration_s: float
    freeze_at_s: float
    frozen_s: float
    """Longer than the lease, so that it lapses."""
    timeout_s: float


DEFAULT = Sizes(rate_rps=40, duration_s=60, freeze_at_s=10, frozen_s=20, timeout_s=30)
SHORT = Sizes(rate_rps=20, duration_s=24, freeze_at_s=4, frozen_s=10, timeout_s=25)


PHASES = ("before", "frozen", "after")


def phase_of(frozen_at: float | None, resumed_at: float | None) -> str:
    if frozen_at is None:
        return "before"
    return "frozen" if resumed_at is None else "after"


def slowest_ok_s(fates: list[Fate]) -> float | None:
    """The longest send-to-answer of the fates answered `ok` in time."""
    times = [f.latency_s for f in fates if f.outcome == "ok" and f.latency_s is not None]
    return max(times, default=None)


async def run(sizes: Sizes, progress: Progress) -> ScenarioReport:
    lease_s = WorkerSettings().lease_s
    if sizes.frozen_s <= lease_s:
        raise ChaosError(f"a freeze of {sizes.frozen_s:g}s does not outlast the {lease_s:g}s lease")
    async with running(NAME, PLAN, progress) as r:
        await r.warm(TIER)
        frozen_at: float | None = None
        resumed_at: float | None = None
        load = r.paced_valid(
            TIER,
            rate_rps=sizes.rate_rps,
            duration_s=sizes.duration_s,
            timeout_s=sizes.timeout_s,
            phase=lambda: phase_of(frozen_at, resumed_at),
        )
        await asyncio.sleep(sizes.freeze_at_s)
        pids = r.stack.worker_pids(TIER)
        if len(pids) < 2:
            load.cancel()
            raise ChaosError(f"{len(pids)} {TIER} worker(s) running, 2 wanted; see {r.log_dir}")
        pid = pids[0]
        frozen_id = r.stack.worker_instance_id(TIER, pid)
        frozen_at = time.time()
        r.stack.freeze(pid)
        r.say(f"froze worker pid {pid} (SIGSTOP) for {sizes.frozen_s:g}s")
        try:
            await asyncio.sleep(sizes.frozen_s)
        finally:
            r.stack.thaw(pid)  # whatever happens, a stopped process is not left behind
            resumed_at = time.time()
        r.say(f"worker pid {pid} goes on (SIGCONT)")
        await load
        await r.settle()
        fates = r.fates()
        back = first_ok(r.observer.seen, resumed_at, where=lambda s: s.worker_id == frozen_id)
    total = tally(fates)
    while_frozen = [f for f in fates if f.sent.phase == "frozen"]
    slowest = slowest_ok_s(while_frozen)
    bound = lease_s + SLACK_S
    frozen_tally = tally(while_frozen)
    back_s = back.at_s - resumed_at if back is not None else None
    return r.report(
        summary=SUMMARY,
        tally=total,
        recover_s=slowest,
        checks=[
            none_lost(total),
            Check(
                "every request sent while frozen answered ok within the lease + 5 s",
                _all_ok_within(frozen_tally.ok, frozen_tally.accepted, slowest, bound),
                f"{frozen_tally.ok}/{frozen_tally.accepted} ok, the slowest in "
                f"{_seconds(slowest)}; bound {bound:.1f}s (lease {lease_s:g}s)",
            ),
            Check(
                "the frozen worker answers again once it goes on",
                back_s is not None,
                f"its first ok {_seconds(back_s)} after SIGCONT",
            ),
        ],
        phases={p: tally(f for f in fates if f.sent.phase == p) for p in PHASES},
        extras={
            "frozen_pid": pid,
            "frozen_instance_id": frozen_id,
            "frozen_s": resumed_at - frozen_at,
            "lease_s": lease_s,
            "slowest_ok_while_frozen_s": slowest,
            "frozen_worker_back_after_s": back_s,
        },
    )


def _all_ok_within(ok: int, accepted: int, slowest: float | None, bound: float) -> bool:
    return ok == accepted and slowest is not None and slowest <= bound


def _seconds(value: float | None) -> str:
    return "never" if value is None else f"{value:.1f}s"


SPEC = ScenarioSpec(NAME, SUMMARY, DEFAULT, SHORT, run)

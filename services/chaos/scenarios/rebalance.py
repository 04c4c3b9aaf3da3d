"""rebalance: workers join and leave every few seconds under steady load (scaler off)."""

from __future__ import annotations

import asyncio
import itertools
import time
from dataclasses import dataclass

from schemas.topics import Tier
from services.chaos.harness import StackPlan
from services.chaos.ledger import tally
from services.chaos.measures import max_gap_s
from services.chaos.model import SimModel
from services.chaos.report import Check, ScenarioReport
from services.chaos.scenarios.base import Progress, ScenarioSpec, running
from services.chaos.scenarios.checks import none_lost

NAME = "rebalance"
SUMMARY = "workers join and leave every few seconds under load"
TIER: Tier = "interactive"
PLAN = StackPlan(SimModel(), tiers=(TIER,), with_scaler=False)


@dataclass(frozen=True)
class Sizes:
    rate_rps: float
    duration_s: float
    every_s: float
    """Seconds between changes of the worker count."""
    replicas: tuple[int, ...]
    """Worker counts, in turn (the stack starts with one)."""
    timeout_s: float


DEFAULT = Sizes(rate_rps=40, duration_s=60, every_s=6, replicas=(3, 1, 2, 3, 1), timeout_s=30)
SHORT = Sizes(rate_rps=20, duration_s=14, every_s=4, replicas=(3, 1), timeout_s=25)


async def run(sizes: Sizes, progress: Progress) -> ScenarioReport:
    async with running(NAME, PLAN, progress) as r:
        await r.warm(TIER)
        load_from = time.time()
        load = r.paced_valid(
            TIER, rate_rps=sizes.rate_rps, duration_s=sizes.duration_s, timeout_s=sizes.timeout_s
        )
        changes = 0
        for replicas in itertools.cycle(sizes.replicas):
            await asyncio.wait({load}, timeout=sizes.every_s)
            if load.done():
                break
            await r.stack.scale(TIER, replicas, "chaos rebalance")
            changes += 1
            r.say(f"workers -> {replicas}")
        await load
        load_until = time.time()
        await r.settle()
        fates = r.fates()
        stall = max_gap_s(r.observer.seen, load_from, load_until)
    total = tally(fates)
    return r.report(
        summary=SUMMARY,
        tally=total,
        recover_s=None,
        checks=[
            none_lost(total),
            Check(
                "every request served ok",
                total.ok == total.accepted,
                f"{total.ok}/{total.accepted} ok; errors {total.errors or 'none'}",
            ),
        ],
        extras={"membership_changes": changes, "longest_stall_s": stall},
    )


SPEC = ScenarioSpec(NAME, SUMMARY, DEFAULT, SHORT, run)

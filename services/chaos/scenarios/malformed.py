"""malformed-storm: every kind of bad event; each gets one result or one DLQ record."""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass

from infra.tasks import cancel_and_wait
from schemas.topics import INGEST, Tier
from services.chaos.harness import ChaosError, ChaosStack, StackPlan
from services.chaos.ledger import outcomes_by, tally, tally_by
from services.chaos.model import SimModel
from services.chaos.report import Check, ScenarioReport
from services.chaos.scenarios.base import Progress, ScenarioSpec, running
from services.chaos.storm import make, plan

NAME = "malformed-storm"
SUMMARY = "random bytes, truncated JSON, NaN, wrong dtype/shape, unknown model, bad reply_to, ..."
TIER: Tier = "interactive"
PLAN = StackPlan(SimModel(), tiers=(TIER,), with_scaler=True)
RSS_FACTOR = 2.0


@dataclass(frozen=True)
class Sizes:
    events: int
    """Small malformed events (every kind in turn, valid controls among them)."""
    big_events: int
    """5 MB events."""
    rate_rps: float
    timeout_s: float
    rss_wait_s: float
    """How long ingest's memory may take to come back down after the storm."""
    seed: int = 9


DEFAULT = Sizes(events=2_000, big_events=10, rate_rps=100, timeout_s=30, rss_wait_s=20)
SHORT = Sizes(events=150, big_events=3, rate_rps=100, timeout_s=20, rss_wait_s=10)


async def _sample_rss(stack: ChaosStack, peak: list[float]) -> None:
    while True:
        rss = stack.ingest_rss_mb()
        if rss is not None:
            peak[0] = max(peak[0], rss)
        await asyncio.sleep(0.25)


async def _rss_back(stack: ChaosStack, bound_mb: float, wait_s: float) -> float | None:
    """Ingest's RSS once under `bound_mb`, or the last value seen after `wait_s`."""
    deadline = time.monotonic() + wait_s
    rss = stack.ingest_rss_mb()
    while (rss is None or rss > bound_mb) and time.monotonic() < deadline:
        await asyncio.sleep(0.5)
        rss = stack.ingest_rss_mb()
    return rss


async def run(sizes: Sizes, progress: Progress) -> ScenarioReport:
    async with running(NAME, PLAN, progress) as r:
        await r.warm(TIER)
        baseline = r.stack.ingest_rss_mb()
        if baseline is None:
            raise ChaosError(f"ingest is not running; see {r.log_dir}")
        kinds = plan(sizes.events, sizes.big_events, seed=sizes.seed)
        rng = random.Random(sizes.seed)
        r.say(f"{len(kinds)} events at {sizes.rate_rps:.0f}/s; ingest RSS {baseline:.0f} MB")
        peak = [baseline]
        sampler = asyncio.create_task(_sample_rss(r.stack, peak))
        try:
            for index, kind in enumerate(kinds):
                r.traffic.send(make(kind, rng, time.time() + sizes.timeout_s), INGEST)
                if index % 10 == 9:
                    await asyncio.sleep(10 / sizes.rate_rps)
            await r.settle()
        finally:
            await cancel_and_wait(sampler)
        after = await _rss_back(r.stack, RSS_FACTOR * baseline, sizes.rss_wait_s)
        fates = r.fates()
    total = tally(fates)
    controls = [f for f in fates if f.sent.kind == "control"]
    served = sum(1 for f in controls if f.outcome == "ok")
    bound = RSS_FACTOR * baseline
    return r.report(
        summary=SUMMARY,
        tally=total,
        recover_s=None,
        checks=[
            Check(
                "every event exactly one result or one DLQ record",
                total.lost == 0 and total.conflicts == 0,
                f"{total.lost} lost, {total.conflicts} with a second, different outcome, "
                f"{total.duplicates} repeats",
            ),
            Check(
                "valid requests in the storm served",
                served == len(controls),
                f"{served}/{len(controls)} ok",
            ),
            Check(
                f"ingest RSS back under {RSS_FACTOR:.0f}x baseline",
                after is not None and after <= bound,
                f"baseline {baseline:.0f} MB, peak {peak[0]:.0f} MB, after "
                + ("ingest gone" if after is None else f"{after:.0f} MB")
                + f" (bound {bound:.0f} MB)",
            ),
        ],
        phases=tally_by(fates, lambda f: f.sent.kind),
        extras={
            "outcomes_by_kind": outcomes_by(fates, lambda f: f.sent.kind),
            "ingest_rss_mb": {"baseline": baseline, "peak": peak[0], "after": after},
        },
    )


SPEC = ScenarioSpec(NAME, SUMMARY, DEFAULT, SHORT, run)

"""overload: 5x one worker's capacity on the batch tier, an interactive trickle beside it."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from services.chaos.harness import StackPlan
from services.chaos.ledger import tally, tally_by
from services.chaos.measures import latencies_ms, lateness_s, percentile
from services.chaos.model import SimModel
from services.chaos.report import Check, ScenarioReport
from services.chaos.scenarios.base import GRACE_S, Progress, ScenarioSpec, running
from services.chaos.scenarios.checks import none_lost

NAME = "overload"
SUMMARY = "5x one worker's capacity on batch, interactive trickle beside it, scaler off"
MODEL = SimModel(max_batch_size=4, a_ms=60.0, b_ms=10.0)
"""40 requests/s per worker: a flood of 5x stays affordable for a 2-core machine."""
PLAN = StackPlan(MODEL, tiers=("interactive", "batch"), with_scaler=False)


@dataclass(frozen=True)
class Sizes:
    flood_factor: float
    """Batch arrival rate as a multiple of one worker's nominal capacity."""
    interactive_rps: float
    duration_s: float
    batch_timeout_s: float
    interactive_timeout_s: float


DEFAULT = Sizes(
    flood_factor=5, interactive_rps=5, duration_s=40, batch_timeout_s=30, interactive_timeout_s=5
)
SHORT = Sizes(
    flood_factor=5, interactive_rps=5, duration_s=6, batch_timeout_s=10, interactive_timeout_s=5
)


async def run(sizes: Sizes, progress: Progress) -> ScenarioReport:
    flood_rps = sizes.flood_factor * MODEL.capacity_rps
    slo_ms = MODEL.config().slo_for("interactive").p99_e2e_ms
    async with running(NAME, PLAN, progress) as r:
        for tier in PLAN.tiers:
            await r.warm(tier)
        r.say(
            f"batch flood {flood_rps:.0f}/s (5x {MODEL.capacity_rps:.0f}/s) and interactive "
            f"{sizes.interactive_rps:.0f}/s for {sizes.duration_s:.0f}s"
        )
        await asyncio.gather(
            r.paced_valid(
                "batch",
                rate_rps=flood_rps,
                duration_s=sizes.duration_s,
                timeout_s=sizes.batch_timeout_s,
            ),
            r.paced_valid(
                "interactive",
                rate_rps=sizes.interactive_rps,
                duration_s=sizes.duration_s,
                timeout_s=sizes.interactive_timeout_s,
            ),
        )
        await r.settle()
        fates = r.fates()
    total = tally(fates)
    tiers = tally_by(fates, lambda f: f.sent.tier or "-")
    interactive = [f for f in fates if f.sent.tier == "interactive"]
    p99 = percentile(latencies_ms(interactive), 99)
    batch = tiers.get("batch", tally([]))
    shed = batch.errors.get("rejected_overload", 0)
    ok_only = [f.latency_s * 1000 for f in interactive if f.outcome == "ok" and f.latency_s]
    late = lateness_s(fates)
    return r.report(
        summary=SUMMARY,
        tally=total,
        recover_s=None,
        checks=[
            Check(
                "interactive p99 within its SLO",
                p99 is not None and p99 <= slo_ms,
                f"p99 {_ms(p99)} (anything but ok counts as never) vs SLO {slo_ms:.0f} ms",
                host_speed=True,
            ),
            Check(
                "batch excess gets rejected_overload",
                shed > 0,
                f"{shed} of {batch.accepted} batch rejected_overload; "
                f"{batch.errors.get('deadline_exceeded', 0)} deadline_exceeded",
            ),
            none_lost(
                total, note=f"{len(late)} answered, but over {GRACE_S:.0f} s after their deadline"
            ),
        ],
        phases=tiers,
        extras={
            "worker_capacity_rps": MODEL.capacity_rps,
            "batch_rate_rps": flood_rps,
            "interactive_slo_p99_ms": slo_ms,
            "interactive_p50_ms": percentile(latencies_ms(interactive), 50),
            "interactive_p99_ms": p99,
            "interactive_ok_only_p99_ms": percentile(ok_only, 99),
            "late_answers": len(late),
            "late_by_s_p50": percentile(late, 50),
            "late_by_s_max": percentile(late, 100),
        },
    )


def _ms(value: float | None) -> str:
    if value is None:
        return "none"
    return "never (over 1% not served ok)" if value == float("inf") else f"{value:.0f} ms"


SPEC = ScenarioSpec(NAME, SUMMARY, DEFAULT, SHORT, run)

"""broker-restart: stop the embedded broker under load, start a fresh one on the same port."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, replace

from schemas.topics import Tier
from services.chaos.harness import StackPlan
from services.chaos.ledger import tally, tally_by
from services.chaos.measures import first_ok_sent_after, last_loss_sent_after
from services.chaos.model import SimModel
from services.chaos.report import Check, ScenarioReport
from services.chaos.scenarios.base import Progress, ScenarioSpec, running
from services.chaos.scenarios.checks import first_ok_after, none_lost

NAME = "broker-restart"
SUMMARY = "broker down ~10 s, back on the same port with no state (a plain producer)"
CLIENT_NAME = "broker-restart-client"
CLIENT_SUMMARY = "the same, requests sent with InferenceClient (waits, resubmits)"
TIER: Tier = "interactive"
RESUME_BOUND_S = 15.0
PHANTOM_WINDOW_S = 5.0
"""How long after the broker's return a plain producer may still lose records to Tansu's
phantom acks (topics re-created within ~1 s; a producer's metadata refresh follows)."""
TANSU_PHANTOM = (
    "Tansu (memory storage) acks records produced to a topic it lost in the restart, then "
    "numbers the re-created topic's records from lower offsets: a producer without "
    "inferbus's client (no resend after a restart) can lose some of what it sends in the "
    "seconds after the broker's return (docs/reliability.md, scripts/tansu_phantom.py)"
)


@dataclass(frozen=True)
class Sizes:
    rate_rps: float
    duration_s: float
    stop_at_s: float
    down_s: float
    timeout_s: float
    """Each request's deadline, seconds after it is sent."""
    via_client: bool = False
    """Send with `InferenceClient.infer` (one awaiting task per request) instead."""


DEFAULT = Sizes(rate_rps=40, duration_s=50, stop_at_s=10, down_s=10, timeout_s=30)
SHORT = Sizes(rate_rps=20, duration_s=18, stop_at_s=3, down_s=6, timeout_s=15)
PLAN = StackPlan(SimModel(), tiers=(TIER,), with_scaler=True)


async def run(sizes: Sizes, progress: Progress) -> ScenarioReport:
    name = CLIENT_NAME if sizes.via_client else NAME
    async with running(name, PLAN, progress, via_client=sizes.via_client) as r:
        await r.warm(TIER)
        phase = "before"
        load = r.paced_valid(
            TIER,
            rate_rps=sizes.rate_rps,
            duration_s=sizes.duration_s,
            timeout_s=sizes.timeout_s,
            phase=lambda: phase,
        )
        await asyncio.sleep(sizes.stop_at_s)
        phase = "down"
        port = await r.stack.stop_broker()
        r.observer.broker_lost()
        r.say(f"broker on port {port} stopped; starting a fresh one in {sizes.down_s:.0f}s")
        await asyncio.sleep(sizes.down_s)
        await r.stack.start_broker(port)
        back_at = time.time()
        phase = "after"
        r.observer.broker_back()
        r.say(f"a fresh broker (no topics, no offsets) is on port {port}")
        await load
        await r.settle()
        fates = r.fates()
    phases = tally_by(fates, lambda f: f.sent.phase)
    after = phases.get("after", tally([]))
    recover = first_ok_sent_after(fates, back_at)
    last_loss = last_loss_sent_after(fates, back_at)
    phantom_only = Check(
        f"losses only in the {PHANTOM_WINDOW_S:.0f} s after the return (phantom acks)",
        last_loss is None or last_loss <= PHANTOM_WINDOW_S,
        "none lost" if last_loss is None else f"last lost event sent {last_loss:.1f} s after",
    )
    return r.report(
        summary=CLIENT_SUMMARY if sizes.via_client else SUMMARY,
        tally=tally(fates),
        recover_s=recover,
        checks=[
            Check(
                f"resumes within {RESUME_BOUND_S:.0f} s of the broker's return",
                recover is not None and recover <= RESUME_BOUND_S,
                first_ok_after("return", recover),
            ),
            Check(
                "0 lost among requests accepted after the restart",
                after.accepted > 0 and after.lost == 0,
                f"{after.lost} of {after.accepted} lost",
                broker_defect=None if sizes.via_client else TANSU_PHANTOM,
            ),
            # The client resends what a restart lost: nothing sent in any phase may be lost.
            *([none_lost(tally(fates), note="every phase")] if sizes.via_client else []),
            *([] if sizes.via_client else [phantom_only]),
        ],
        phases=phases,
        extras={
            "down_s": sizes.down_s,
            "observer_errors": dict(r.observer.errors),
            "send_failures": dict(r.traffic.failures),
        },
    )


SPEC = ScenarioSpec(NAME, SUMMARY, DEFAULT, SHORT, run)
CLIENT_SPEC = ScenarioSpec(
    CLIENT_NAME,
    CLIENT_SUMMARY,
    replace(DEFAULT, via_client=True),
    replace(SHORT, via_client=True),
    run,
)

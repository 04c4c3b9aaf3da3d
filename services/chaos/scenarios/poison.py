"""poison: one event nested 10,000 deep, then valid requests on the same key behind it."""

from __future__ import annotations

import time
from dataclasses import dataclass

from schemas.topics import INGEST, Tier
from services.chaos.events import Event, nested, new_id, poison, valid
from services.chaos.harness import StackPlan
from services.chaos.ledger import Fate, outcomes_by, tally, tally_by
from services.chaos.model import SimModel
from services.chaos.report import Check, ScenarioReport
from services.chaos.scenarios.base import Progress, ScenarioSpec, running

NAME = "poison"
SUMMARY = "a 10,000-deep event, then valid requests on its key: all served, poison dead-lettered"
TIER: Tier = "interactive"


@dataclass(frozen=True)
class Sizes:
    depths: tuple[int, ...]
    """One poison per depth: tensor data nested this deep (a request id that can be read)."""
    anonymous_depth: int | None
    """Also a bare nested array this deep (no request id at all); None: not sent."""
    followers: int
    """Valid requests sent behind each poison, on its key."""
    timeout_s: float


DEFAULT = Sizes(depths=(10_000, 100_000), anonymous_depth=10_000, followers=50, timeout_s=30)
SHORT = Sizes(depths=(10_000,), anonymous_depth=None, followers=50, timeout_s=20)
PLAN = StackPlan(SimModel(), tiers=(TIER,), with_scaler=True)


def _poisons(sizes: Sizes) -> list[tuple[str, Event]]:
    """(label, poison) pairs, each on a key of its own."""
    deadline = time.time() + sizes.timeout_s
    out = [
        (
            f"depth-{depth}",
            poison(depth=depth, tier=TIER, deadline_s=deadline, key=new_id().encode()),
        )
        for depth in sizes.depths
    ]
    if sizes.anonymous_depth is not None:
        value = nested(sizes.anonymous_depth, leaf=f'"{new_id()}"').encode()
        bare = Event(value, "poison", None, deadline, None, new_id().encode())
        out.append((f"bare-{sizes.anonymous_depth}", bare))
    return out


async def run(sizes: Sizes, progress: Progress) -> ScenarioReport:
    async with running(NAME, PLAN, progress) as r:
        await r.warm(TIER)
        first_sent = time.time()
        for label, bad in _poisons(sizes):
            # Awaited one by one: the followers must sit behind the poison on its partition.
            await r.traffic.send_now(bad, INGEST, phase=label)
            for _ in range(sizes.followers):
                deadline = time.time() + sizes.timeout_s
                follower = valid(tier=TIER, deadline_s=deadline, key=bad.key)
                await r.traffic.send_now(follower, INGEST, phase=label)
            r.say(f"sent poison {label} and {sizes.followers} valid requests on its key")
        await r.settle()
        fates = r.fates()
    followers = [f for f in fates if f.sent.kind == "valid"]
    bad_ones = [f for f in fates if f.sent.kind == "poison"]
    served = sum(1 for f in followers if f.outcome == "ok")
    last = _last_outcome(followers)
    return r.report(
        summary=SUMMARY,
        tally=tally(fates),
        recover_s=last - first_sent if last is not None and served == len(followers) else None,
        checks=[
            Check(
                "every valid request behind a poison served",
                served == len(followers),
                f"{served}/{len(followers)} ok",
            ),
            Check(
                "each poison gets exactly one outcome (DLQ or a named error)",
                all(f.first is not None and not f.late and f.conflicts == 0 for f in bad_ones),
                ", ".join(f"{f.sent.phase}: {f.outcome}" for f in bad_ones),
            ),
        ],
        phases=tally_by(fates, lambda f: f.sent.phase),
        extras={"poison_outcomes": outcomes_by(bad_ones, lambda f: f.sent.phase)},
    )


def _last_outcome(items: list[Fate]) -> float | None:
    times = [f.first.at_s for f in items if f.first is not None]
    return max(times) if times else None


SPEC = ScenarioSpec(NAME, SUMMARY, DEFAULT, SHORT, run)

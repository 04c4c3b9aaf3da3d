"""What every scenario shares: a stack with a producer and an observer, warm-up, settling."""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from infra.tasks import cancel_and_wait, wait_event, within
from schemas.topics import Tier, ingest_topic
from services.chaos.events import valid
from services.chaos.harness import ChaosError, ChaosStack, StackPlan
from services.chaos.ledger import DLQ, LOST, NOT_ACCEPTED, Fate, Sent, Tally, fates
from services.chaos.observer import Observer
from services.chaos.report import Check, ScenarioReport
from services.chaos.traffic import ClientProducer, RawProducer, Traffic

Progress = Callable[[str], None]
PROBE = "probe"
GRACE_S = 5.0
"""After its deadline, how long an event may still take before it counts as lost."""
WARM_TIMEOUT_S = 120.0
S = TypeVar("S")


@dataclass(frozen=True)
class ScenarioSpec(Generic[S]):
    """A scenario: its name, what it does, its sizes (default and `--short`), its run."""

    name: str
    summary: str
    default: S
    short: S
    run: Callable[[S, Progress], Awaitable[ScenarioReport]]

    def start(self, *, short: bool, progress: Progress) -> Awaitable[ScenarioReport]:
        return self.run(self.short if short else self.default, progress)


@dataclass
class Run:
    """One scenario's stack, producer and observer."""

    name: str
    stack: ChaosStack
    traffic: Traffic
    observer: Observer
    progress: Progress
    started_s: float
    """`time.monotonic()` when the scenario began starting its stack."""
    grace_s: float = GRACE_S

    @property
    def log_dir(self) -> str:
        return str(self.stack.log_dir)

    def say(self, text: str) -> None:
        self.progress(f"{self.name}: {text}")

    async def warm(self, tier: Tier, *, timeout_s: float = WARM_TIMEOUT_S) -> float:
        """Send a probe a second until one is served `ok`; returns the seconds it took.

        Probes are not part of any tally.
        """
        started = time.monotonic()
        probes: set[str | None] = set()
        while time.monotonic() - started < timeout_s:
            event = valid(tier=tier, deadline_s=time.time() + 30, kind=PROBE)
            probes.add(event.request_id)
            self.traffic.send(event, ingest_topic(tier), phase=PROBE)
            with contextlib.suppress(TimeoutError):
                await within(self._served(probes), 1.0)
                waited = time.monotonic() - started
                self.say(f"stack serves {tier} ({waited:.1f}s after start)")
                return waited
        raise ChaosError(
            f"no {tier} request was served within {timeout_s:.0f}s of start; see {self.log_dir}"
        )

    async def _served(self, request_ids: set[str | None]) -> None:
        while not any(s.ref in request_ids and s.status == "ok" for s in self.observer.seen):
            self.observer.changed.clear()
            await self.observer.changed.wait()

    def paced_valid(
        self,
        tier: Tier,
        *,
        rate_rps: float,
        duration_s: float,
        timeout_s: float,
        phase: Callable[[], str] = lambda: "main",
    ) -> asyncio.Task[int]:
        """Send valid `tier` requests at `rate_rps` for `duration_s` in the background, each
        due `timeout_s` after it is sent; the task returns how many were sent."""
        return asyncio.create_task(
            self.traffic.paced(
                lambda: valid(tier=tier, deadline_s=time.time() + timeout_s),
                ingest_topic(tier),
                rate_rps=rate_rps,
                duration_s=duration_s,
                phase=phase,
            )
        )

    def scenario_sent(self) -> list[Sent]:
        return [s for s in self.traffic.sent if s.kind != PROBE]

    def pending(self) -> int:
        """Sent events (not probes) with no outcome yet, accepted or not yet acked."""
        answered = {(s.channel, s.ref) for s in self.observer.seen}
        return self.traffic.in_flight + sum(
            1
            for s in self.scenario_sent()
            if s.accepted
            and ("dlq", s.digest) not in answered
            and ("result", s.request_id) not in answered
        )

    async def settle(self) -> None:
        """Wait until every event has an outcome, or the last deadline plus the grace passed."""
        await self.traffic.flush()
        sent = self.scenario_sent()
        if not sent:
            return
        until = max(s.deadline_s for s in sent) + self.grace_s
        last_said = 0.0
        while (left := self.pending()) and time.time() < until:
            if time.monotonic() - last_said >= 2:
                last_said = time.monotonic()
                self.say(f"waiting for {left} outcome(s), at most {until - time.time():.0f}s more")
            self.observer.changed.clear()
            await wait_event(self.observer.changed, 0.5)

    def fates(self, sent: Iterable[Sent] | None = None) -> list[Fate]:
        chosen = list(self.scenario_sent() if sent is None else sent)
        return fates(chosen, self.observer.seen, grace_s=self.grace_s)

    def counts(self) -> str:
        """The scenario's events so far (not the probes) by first outcome, for progress."""
        outcomes = Counter(
            "waiting" if f.first is None and f.sent.accepted else f.outcome for f in self.fates()
        )
        waiting, ok, dlq, lost = (outcomes.pop(k, 0) for k in ("waiting", "ok", DLQ, LOST))
        errors = sum(n for k, n in outcomes.items() if k != NOT_ACCEPTED)
        return (
            f"sent {len(self.scenario_sent())}: ok {ok} errors {errors} dlq {dlq} "
            f"late {lost} waiting {waiting} not accepted {outcomes[NOT_ACCEPTED]}; "
            f"unacked {self.traffic.in_flight}"
        )

    async def ticker(self, every_s: float = 3.0) -> None:
        """Progress lines while a scenario runs (cancel it to stop)."""
        started = time.monotonic()
        while True:
            await asyncio.sleep(every_s)
            self.say(f"t={time.monotonic() - started:.0f}s {self.counts()}")

    def report(
        self,
        *,
        summary: str,
        tally: Tally,
        recover_s: float | None,
        checks: Sequence[Check],
        phases: dict[str, Tally] | None = None,
        extras: dict[str, Any] | None = None,
    ) -> ScenarioReport:
        """The scenario's report: its own checks, then the stack's (once the stack is closed)."""
        return ScenarioReport(
            name=self.name,
            summary=summary,
            tally=tally,
            recover_s=recover_s,
            checks=[*checks, *stack_checks(self)],
            duration_s=time.monotonic() - self.started_s,
            log_dir=self.log_dir,
            phases=phases or {},
            extras=extras or {},
        )


def stack_checks(run: Run) -> list[Check]:
    """What every scenario checks of the stack itself, once it is closed."""
    failure = run.stack.scaler_failure
    return [
        Check(
            "the scaler's loop kept running",
            failure is None,
            failure or "ran until the stack was closed",
        )
    ]


@asynccontextmanager
async def running(
    name: str, plan: StackPlan, progress: Progress, *, via_client: bool = False
) -> AsyncIterator[Run]:
    """Start a fresh embedded stack for one scenario; stop all of it on the way out.

    Requests go through a plain producer, or with `via_client` through `InferenceClient`.
    """
    started_s = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix=f"inferbus-chaos-{name}-"))
    exits = AsyncExitStack()
    try:
        stack = ChaosStack(plan, workdir)
        exits.push_async_callback(stack.close)
        progress(f"{name}: starting the embedded stack (logs in {stack.log_dir})")
        bootstrap = await stack.start()
        observer = Observer(bootstrap)
        await observer.start()
        exits.push_async_callback(observer.stop)
        traffic = Traffic(ClientProducer(bootstrap) if via_client else RawProducer(bootstrap))
        await traffic.start()
        exits.push_async_callback(traffic.stop)
        run = Run(name, stack, traffic, observer, progress, started_s)
        ticker = asyncio.create_task(run.ticker())
        exits.push_async_callback(cancel_and_wait, ticker)
        try:
            yield run
        except asyncio.CancelledError:
            run.say(f"interrupted; had {run.counts()}; stopping its stack (Ctrl-C again: at once)")
            raise
    finally:
        await close_apart(exits)


async def close_apart(exits: AsyncExitStack) -> None:
    """Close what a scenario started, in a task of its own.

    Ctrl-C cancels the scenario's task, and it stays cancelling while it stops the stack:
    a Kafka client's stop that sees its task cancelling takes an inner cancellation for its
    caller's and ends half-way (`SecureConsumer.stop`), which stopped `Stack.close` before
    ingest and the broker (an ingest process outlived the command). A second cancellation
    of the scenario's task still reaches this one.
    """
    await asyncio.create_task(exits.aclose(), name="chaos-close")

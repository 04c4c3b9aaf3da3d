"""The scaler's rollout step: judge every canary that takes traffic, and roll back the ones
worse than stable by publishing the decision (the verdict itself is `verdict.judge`)."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from aiokafka.errors import KafkaError

from infra.models.config import RolloutConfig
from infra.models.repository import ModelRepository
from infra.rollout.state import Effective, RolloutBook, effective
from scaler.rollout.verdict import Verdict, judge
from scaler.rollout.windows import VersionStats, VersionWindows
from schemas.errors import InferbusError
from schemas.rollout import RolloutEvidence, RolloutRecord, VersionNumbers
from tracing.metrics import set_rollout

log = logging.getLogger(__name__)

Publish = Callable[[RolloutRecord], Awaitable[None]]
"""Produces a decision to inferbus.rollouts (and logs it)."""


class RolloutJudge:
    """Holds the last verdict per model; publishes only rollbacks (a change of state)."""

    def __init__(
        self,
        models: ModelRepository,
        book: RolloutBook,
        windows: VersionWindows,
        publish: Publish,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.models = models
        self.book = book
        self.windows = windows
        self._publish = publish
        self._clock = clock
        self.verdicts: dict[str, Verdict] = {}
        """The latest verdict per model with a canary taking traffic."""
        self._problems: dict[str, str] = {}

    async def tick(self) -> list[RolloutRecord]:
        """Judge every model once; returns the rollbacks published."""
        published = []
        for name in self.models.names():
            try:
                config = self.models.config(name)
            except InferbusError as exc:
                if self._problems.get(name) != str(exc):
                    log.warning("event=rollout_unjudged model=%s error=%s", name, exc)
                self._problems[name] = str(exc)
                continue
            self._problems.pop(name, None)
            rollout = config.rollout
            if rollout is None or rollout.canary is None:
                self.verdicts.pop(name, None)
                continue
            now = effective(rollout, self.book.get(name))
            record = await self._judge(name, rollout, now)
            if record is not None:
                published.append(record)
        return published

    async def _judge(
        self, name: str, rollout: RolloutConfig, now: Effective
    ) -> RolloutRecord | None:
        window_s = judged_window_s(
            rollout.verdict.window_s, now.decision.at if now.decision else None, self._clock()
        )
        assert now.stable is not None and now.canary is not None
        stable = self.windows.stats(name, now.stable, window_s)
        canary = self.windows.stats(name, now.canary, window_s)
        set_rollout(
            name,
            now.canary,
            now.share,
            {
                "stable": (now.stable, stable.requests, _rate(stable), stable.p99_ms),
                "canary": (now.canary, canary.requests, _rate(canary), canary.p99_ms),
            },
        )
        if now.state != "canary" or now.share <= 0:
            self.verdicts.pop(name, None)
            return None
        half = window_s / 2
        halves = (
            (
                self.windows.stats(name, now.stable, window_s, ended_s_ago=half),
                self.windows.stats(name, now.canary, window_s, ended_s_ago=half),
            ),
            (
                self.windows.stats(name, now.stable, half),
                self.windows.stats(name, now.canary, half),
            ),
        )
        verdict = judge(stable, canary, rollout.verdict, halves=halves)
        previous = self.verdicts.get(name)
        self.verdicts[name] = verdict
        if verdict.action != "rollback":
            if previous is None or previous.action != verdict.action:
                log.info(
                    "event=canary_verdict model=%s canary=%s action=%s reason=%r",
                    name,
                    now.canary,
                    verdict.action,
                    verdict.reason,
                )
            return None
        assert verdict.rule is not None
        record = RolloutRecord(
            model=name,
            stable=rollout.stable,
            canary=now.canary,
            state="rolled_back",
            share=0.0,
            reason=verdict.reason,
            by="verdict",
            at=datetime.fromtimestamp(self._clock(), UTC),
            evidence=RolloutEvidence(
                window_s=window_s,
                rule=verdict.rule,
                stable=_numbers(now.stable, stable),
                canary=_numbers(now.canary, canary),
                max_error_rate_increase=rollout.verdict.max_error_rate_increase,
                max_p99_ratio=rollout.verdict.max_p99_ratio,
                min_p99_increase_ms=rollout.verdict.min_p99_increase_ms,
            ),
        )
        try:
            await self._publish(record)
        except KafkaError as exc:  # judged again next tick, and published then
            log.error("event=rollback_publish_failed model=%s error=%r (retrying)", name, exc)
            return None
        self.book.put(record)  # in force now, before the feed reads it back
        return record


def judged_window_s(window_s: float, decided_at: datetime | None, now_s: float) -> float:
    """The window a verdict reads: `window_s`, but no results from before the decision in
    force. A share given right after a rollback was rolled back again a second later on
    the very results the first verdict had judged."""
    if decided_at is None:
        return window_s
    return max(min(window_s, now_s - decided_at.timestamp()), 0.0)


def _rate(stats: VersionStats) -> float | None:
    return stats.error_rate if stats.requests else None


def _numbers(version: str, stats: VersionStats) -> VersionNumbers:
    return VersionNumbers(
        version=version,
        requests=stats.requests,
        errors=stats.errors,
        error_rate=stats.error_rate,
        p99_ms=stats.p99_ms,
    )

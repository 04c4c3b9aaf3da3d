"""Every decision goes to `inferbus.scaler.decisions` keyed by group, and to the log as one
line; an idle group's unchanged hold goes every 25 s (`worth_writing`)."""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from scaler.decision import GroupDecision
from scaler.signals import GroupSignals
from scaler.snapshot import signals_to_dict
from schemas.topics import DECISIONS

log = logging.getLogger("inferbus.scaler.decisions")

DECISION_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Written:
    """What a group's last decision record said that matters to its readers, and when."""

    said: tuple[object, ...]
    at: float
    signals: GroupSignals | None = None
    """The signals the record carried: a hold left out must be rebuildable from them."""


def what_it_says(
    decision: GroupDecision, *, applied: bool, error: str | None, acting: bool
) -> tuple[object, ...]:
    """The parts of a decision record its readers act on: the counts, the diagnosis and
    whether it was applied (the reasons' numbers move every tick)."""
    return (
        decision.current,
        decision.desired,
        decision.current_standby,
        decision.standby,
        decision.diagnosis,
        applied,
        error,
        acting,
    )


def is_idle(signals: GroupSignals | None) -> bool:
    """No arrivals and nothing queued, by fresh signals (unknown counts as not idle)."""
    if signals is None or signals.stale:
        return False
    return signals.arrival_rps == 0 and signals.lag == 0


def worth_writing(
    said: tuple[object, ...],
    signals: GroupSignals | None,
    last: Written | None,
    *,
    now: float,
    idle_every_s: float,
) -> bool:
    """Every tick's decision is written, except an idle group's hold that says what the last
    record said, on the same signals but for their time: that one once per `idle_every_s`
    (0: every tick). So a reader rebuilds every hold left out from the record before it
    (`scaler/recall.py`): the first idle tick after a busy one is always written, and so is
    one whose window still holds the last requests' latencies.

    Every record wakes every worker that reads the topic, and an idle stack of six groups
    wrote six holds every tick for nothing. A starting worker reads the last 30 s of
    decisions to learn how many of its group consume, so `idle_every_s` stays under that
    (`scaler.settings.IDLE_HOLD_EVERY_S`);
    a group with traffic keeps a record a tick, the time series the load reports plot.
    """
    if last is None or said != last.said or not is_idle(signals):
        return True
    if signals is None or last.signals is None or not same_but_time(signals, last.signals):
        return True
    return now - last.at >= idle_every_s


def same_but_time(a: GroupSignals, b: GroupSignals) -> bool:
    """The same signals, collected at different times."""
    return dataclasses.replace(a, collected_at=b.collected_at) == b


class Producer(Protocol):
    """The one producer method used here (aiokafka's AIOKafkaProducer has it)."""

    async def send_and_wait(self, topic: str, value: bytes, key: bytes) -> Any: ...


def decision_record(
    decision: GroupDecision,
    *,
    policy: str,
    at: float,
    tick_at: float | None = None,
    signals: GroupSignals | None = None,
    applied: bool = True,
    error: str | None = None,
    acting: bool = True,
    checkpoint: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON event: the decision, its inputs and whether the actuator applied it.

    `at` is when it is written; `tick_at` the policy's clock (`now`) at the tick that made
    it, the same in every group's record of one tick (what a restart replays them at,
    `scaler/recall.py`). `acting`: the scaler acts on its decisions (not a dry run).
    Workers read `desired` of an acting scaler's decisions to know how many of them
    consume (the rest stand by). `checkpoint`: the group's policy memory after the tick,
    every few minutes (`scaler/checkpoint.py`); null otherwise.
    """
    return {
        "schema_version": DECISION_SCHEMA_VERSION,
        "policy": policy,
        "at": at,
        "tick_at": tick_at,
        "model": decision.model,
        "tier": decision.tier,
        **decision.to_dict(),
        "applied": applied,
        "acting": acting,
        "error": error,
        "signals": signals_to_dict(signals) if signals is not None else None,
        "state": None if checkpoint is None else dict(checkpoint),
    }


def unapplied_note(*, applied: bool, error: str | None, acting: bool) -> str:
    """What the readable line adds when the actuator did not set this count: its error, or
    that the scaler does not act. An acting scaler's hold (the count already the one
    wanted) is not applied either, and there is nothing to add."""
    if error is not None:
        return f" (not applied: {error})"
    if applied or acting:
        return ""
    return " (not applied: dry run)"


async def publish_decision(
    producer: Producer,
    decision: GroupDecision,
    *,
    policy: str,
    at: float,
    tick_at: float | None = None,
    signals: GroupSignals | None = None,
    applied: bool = True,
    error: str | None = None,
    acting: bool = True,
    checkpoint: Mapping[str, Any] | None = None,
    topic: str = DECISIONS,
) -> None:
    """Log the decision's readable line and produce its record keyed by group."""
    record = decision_record(
        decision,
        policy=policy,
        at=at,
        tick_at=tick_at,
        signals=signals,
        applied=applied,
        error=error,
        acting=acting,
        checkpoint=checkpoint,
    )
    log.info("%s%s", decision.line(), unapplied_note(applied=applied, error=error, acting=acting))
    await producer.send_and_wait(
        topic, json.dumps(record, separators=(",", ":")).encode(), key=decision.group.encode()
    )

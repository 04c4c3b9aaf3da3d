"""`inferbus models promote|rollback|share`: a rollout decision by hand, on inferbus.rollouts.

The decision is a `RolloutRecord` for model.yaml's current stable and canary versions; ingest,
the workers and the scaler fold it over model.yaml (`infra.rollout.state.effective`).
"""

from __future__ import annotations

import getpass
import logging
import socket
from collections import Counter
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Literal

from pydantic import ValidationError

from infra.feed import read_to_end
from infra.kafka import make_producer, start_with_retry
from infra.models.config import ModelConfig
from infra.registry import RegistryTable, fold_value, live_instances
from infra.rollout.publish import publish_rollout
from infra.rollout.state import RolloutBook, effective
from infra.topics import BROKER_EVENT_KEY
from schemas.errors import InferbusError
from schemas.rollout import RolloutRecord
from schemas.topics import INSTANCES, ROLLOUTS, TIERS, Lane, worker_group

log = logging.getLogger(__name__)

Action = Literal["promote", "rollback", "share"]


class RolloutRefused(InferbusError):
    """A manual rollout decision that cannot apply to the model as configured."""


def operator() -> str:
    """Who decided, for the record: `cli:<user>@<host>`."""
    try:
        user = getpass.getuser()
    except OSError:  # no login name in a bare container: the host still says where
        user = "unknown"
    return f"cli:{user}@{socket.gethostname()}"


def manual_record(
    config: ModelConfig,
    action: Action,
    *,
    at: datetime,
    by: str,
    share: float | None = None,
    reason: str | None = None,
) -> RolloutRecord:
    """The record for a decision by hand (pure); RolloutRefused when the model has no
    canary or the share is outside 0..1."""
    rollout = config.rollout
    if rollout is None or rollout.canary is None:
        raise RolloutRefused(
            f"model {config.name!r} has no canary: set rollout.canary (with rollout.stable "
            f"and rollout.share) in its model.yaml before `{action}`",
            model=config.name,
        )
    if action == "share":
        if share is None or not 0 <= share <= 1:
            raise RolloutRefused(
                f"share must be between 0 and 1 (the canary's share of requests), got {share}",
                model=config.name,
            )
        state: Literal["canary", "rolled_back", "promoted"] = "canary"
        default = f"canary share set to {share:g} by hand"
    elif action == "promote":
        state, share = "promoted", 0.0
        default = (
            f"promoted by hand: stable workers switch to {rollout.canary}; make it permanent "
            f"with rollout.stable: {rollout.canary!r} in model.yaml"
        )
    else:
        state, share = "rolled_back", 0.0
        default = "rolled back by hand"
    return RolloutRecord(
        model=config.name,
        stable=rollout.stable,
        canary=rollout.canary,
        state=state,
        share=share,
        reason=reason or default,
        by=by,
        at=at,
    )


def against_current(
    record: RolloutRecord,
    current: RolloutRecord | None,
    *,
    canary_ready: bool | None = None,
    force: bool = False,
) -> str | None:
    """A note on a decision by hand, given the one in force and whether a canary worker is
    ready on the canary version (pure); RolloutRefused for one that would undo more than it
    says, or promote a canary no worker serves or the verdict rolled back (`force` promotes
    anyway). None: nothing to say."""
    notes: list[str] = []
    if record.state == "promoted" and canary_ready is False:
        unseen = (
            f"no canary worker of model {record.model!r} is ready on version "
            f"{record.canary!r} (it never came up, or is gone): promoted, the stable workers "
            "would move to a version that has served nothing here"
        )
        if not force:
            raise RolloutRefused(
                f"{unseen}. Start it first (`inferbus worker --lane canary`, or a share), or "
                "promote anyway with --force",
                model=record.model,
            )
        notes.append(f"{unseen}; promoted anyway")
    # A decision made for other versions is not in force (model.yaml moved on): no word.
    if current is not None and (current.stable, current.canary) == (record.stable, record.canary):
        notes.extend(_against_decision(record, current, force=force))
    return "; ".join(notes) or None


def _against_decision(record: RolloutRecord, current: RolloutRecord, *, force: bool) -> list[str]:
    """`against_current` for a decision made for the same versions (model.yaml unchanged)."""
    since = f"since {current.at:%Y-%m-%d %H:%M:%S} UTC, by {current.by}"
    if record.state == "canary" and current.state == "promoted":
        raise RolloutRefused(
            f"model {record.model!r} is promoted ({since}): its stable workers serve the "
            f"canary's version {record.canary!r}, and a share would send them back to "
            f"{record.stable!r}. Roll back first (`inferbus models rollback {record.model}`) "
            f"if that is what you mean, or keep it: rollout.stable: {record.canary!r} in "
            "model.yaml",
            model=record.model,
        )
    if record.state == "promoted" and current.state == "rolled_back" and current.by == "verdict":
        if not force:
            raise RolloutRefused(
                f"model {record.model!r}: the verdict rolled canary {record.canary!r} back "
                f"({since}): {current.reason}. Give it a share again and let it prove "
                f"itself (`inferbus models share {record.model} S`), or promote anyway "
                "with --force",
                model=record.model,
            )
        return [f"promoting over the verdict's rollback ({since}): {current.reason}"]
    if record.state == current.state != "canary":
        return [f"already {record.state.replace('_', ' ')} ({since}); published again"]
    return []


def status_lines(
    config: ModelConfig,
    decision: RolloutRecord | None,
    serving: Mapping[Lane, Counter[str | None]] | None = None,
) -> list[str]:
    """The rollout plan in model.yaml, the decision on inferbus.rollouts, what is in force
    from the two, and what the ready workers of each lane serve (`workers_ready`) (pure):
    what `inferbus models status` prints."""
    plan = config.rollout
    if plan is None:
        return [f"{config.name}: no rollout block: every worker serves the newest version"]
    lines = [
        f"plan (model.yaml): stable {plan.stable}"
        + (f", canary {plan.canary} at share {plan.share:g}" if plan.canary else ", no canary")
    ]
    if decision is None:
        lines.append("decision (inferbus.rollouts): none")
    else:
        applies = (decision.stable, decision.canary) == (plan.stable, plan.canary)
        lines.append(
            f"decision (inferbus.rollouts): {decision.line()} at "
            f"{decision.at:%Y-%m-%d %H:%M:%S} UTC"
            + ("" if applies else " (made for other versions: the plan is in force)")
        )
    now = effective(plan, decision)
    lines.append(
        f"in force: stable workers serve {now.stable}"
        + (f", canary {now.canary} takes share {now.share:g}" if now.canary else "")
        + f" ({now.state})"
    )
    if serving is not None:
        lines.append(
            "workers ready: " + "; ".join(_lane_line(lane, serving[lane]) for lane in serving)
        )
    return lines


def _lane_line(lane: Lane, versions: Counter[str | None]) -> str:
    if not versions:
        return f"{lane} none"
    return f"{lane} " + ", ".join(
        f"{n} on {version if version is not None else '?'}"
        for version, n in sorted(versions.items(), key=lambda item: str(item[0]))
    )


async def current_decision(bootstrap: str, model: str) -> RolloutRecord | None:
    """The decision in force for `model`: `inferbus.rollouts` read once to its end."""
    book = RolloutBook()
    await read_to_end(bootstrap, ROLLOUTS, book.observe, client_id="inferbus-models")
    return book.get(model)


async def workers_ready(bootstrap: str, model: str) -> dict[Lane, Counter[str | None]]:
    """Per lane of `model`, the versions its live workers registered `ready` serve, with how
    many workers serve each (`inferbus.instances` read once to its end)."""
    table = RegistryTable()

    def fold(key: bytes | None, value: bytes | None) -> None:
        nonlocal table
        if key == BROKER_EVENT_KEY:
            return  # a note to the instances, not an instance
        try:
            table = fold_value(table, key, value)
        except ValidationError as exc:  # said; the other records still count
            log.warning("event=registry_record_invalid key=%r errors=%d", key, exc.error_count())

    await read_to_end(bootstrap, INSTANCES, fold, client_id="inferbus-models")
    lanes: tuple[Lane, ...] = ("stable", "canary")
    groups = {lane: {worker_group(model, tier, lane) for tier in TIERS} for lane in lanes}
    found: dict[Lane, Counter[str | None]] = {lane: Counter() for lane in lanes}
    for record in live_instances(table, datetime.now(UTC)).values():
        if record.state != "ready":
            continue
        for lane in lanes:
            if not groups[lane].isdisjoint(record.groups or [record.group]):
                found[lane][record.model_version] += 1
    return found


async def publish_manual(bootstrap: str, record: RolloutRecord) -> None:
    """Produce the decision (acked by all replicas), then disconnect."""
    producer = make_producer(bootstrap, client_id="inferbus-models")
    try:  # stopped whatever fails, its start too (else aiokafka warns it was left unclosed)
        await start_with_retry(producer.start, what="models-producer", attempts=3)
        await publish_rollout(producer, record)
    finally:
        await producer.stop()

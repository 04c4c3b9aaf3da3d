"""`inferbus models promote|rollback|share`: a rollout decision by hand, on inferbus.rollouts.

The decision is a `RolloutRecord` for model.yaml's current stable and canary versions; ingest,
the workers and the scaler fold it over model.yaml (`infra.rollout.state.effective`).
"""

from __future__ import annotations

import getpass
import socket
from datetime import datetime
from typing import Literal

from infra.kafka import make_producer, start_with_retry
from infra.models.config import ModelConfig
from infra.rollout.publish import publish_rollout
from schemas.errors import InferbusError
from schemas.rollout import RolloutRecord

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


async def publish_manual(bootstrap: str, record: RolloutRecord) -> None:
    """Produce the decision (acked by all replicas), then disconnect."""
    producer = make_producer(bootstrap, client_id="inferbus-models")
    try:  # stopped whatever fails, its start too (else aiokafka warns it was left unclosed)
        await start_with_retry(producer.start, what="models-producer", attempts=3)
        await publish_rollout(producer, record)
    finally:
        await producer.stop()

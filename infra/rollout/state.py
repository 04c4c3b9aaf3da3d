"""The rollout in force for a model: model.yaml's `rollout` block with the latest decision
on `inferbus.rollouts` folded over it."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from pydantic import ValidationError

from infra.models.config import RolloutConfig, RouteKey
from schemas.rollout import RolloutRecord, RolloutState
from schemas.topics import Lane

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Effective:
    """What ingest routes by and what each lane's workers serve, now."""

    stable: str | None
    """Version the stable lane serves; None: no rollout, the newest complete version."""
    canary: str | None
    """Version the canary lane serves; None: no canary."""
    share: float
    """The canary lane's share of requests."""
    key: RouteKey
    state: RolloutState | None
    """None without a rollout block; `canary` while model.yaml's share applies."""
    decision: RolloutRecord | None = None
    """The record on inferbus.rollouts in force, if one is."""


NO_ROLLOUT = Effective(None, None, 0.0, "request_id", None)


def effective(rollout: RolloutConfig | None, record: RolloutRecord | None) -> Effective:
    """Fold the latest decision over model.yaml's rollout (pure).

    A decision counts only while model.yaml names the same stable and canary versions it
    was made for: naming a new canary starts over from model.yaml's share, and making a
    promotion permanent in model.yaml (`stable:` the promoted version) leaves nothing for
    the old decision to say.
    """
    if rollout is None:
        return NO_ROLLOUT
    base = Effective(
        rollout.stable,
        rollout.canary,
        rollout.share if rollout.canary is not None else 0.0,
        rollout.key,
        "canary",
    )
    if (
        record is None
        or rollout.canary is None
        or (record.stable, record.canary) != (rollout.stable, rollout.canary)
    ):
        return base
    if record.state == "promoted":
        return Effective(rollout.canary, rollout.canary, 0.0, rollout.key, "promoted", record)
    return Effective(
        rollout.stable, rollout.canary, record.share, rollout.key, record.state, record
    )


def lane_version(rollout: Effective, lane: Lane) -> str | None:
    """The version a lane's workers serve; None: the stable lane of a model without a
    rollout (the newest complete version), or a canary lane with no canary."""
    return rollout.stable if lane == "stable" else rollout.canary


class RolloutBook:
    """The latest record per model read from `inferbus.rollouts` (log order wins)."""

    def __init__(self) -> None:
        self._records: dict[str, RolloutRecord] = {}
        self.invalid = 0
        """Records that could not be read (logged, skipped)."""

    def get(self, model: str) -> RolloutRecord | None:
        return self._records.get(model)

    def put(self, record: RolloutRecord) -> None:
        """A record this process published itself (before it reads it back)."""
        self._records[record.model] = record

    def observe(self, key: bytes | None, value: bytes | None) -> None:
        """Fold one record as read from the topic; a tombstone forgets the model."""
        if value is None:
            if key is not None:
                self._records.pop(key.decode(errors="replace"), None)
            return
        try:
            record = RolloutRecord.model_validate_json(value)
        except ValidationError as exc:
            self.invalid += 1
            log.warning("event=rollout_record_invalid key=%r errors=%d", key, exc.error_count())
            return
        self._records[record.model] = record

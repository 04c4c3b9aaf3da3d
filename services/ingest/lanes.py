"""Which lane of a model's rollout a request goes to: stable, or canary by a stable hash."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime

from infra.models.config import ModelConfig
from infra.registry import RegistryTable, is_live
from infra.rollout.split import lane_for
from infra.rollout.state import Effective, RolloutBook, effective
from schemas.errors import ModelNotFound
from schemas.request import InferenceRequest
from schemas.topics import Lane, Tier, worker_group


def choose_lane(rollout: Effective, model: str, request: InferenceRequest) -> Lane:
    """The lane a request belongs to (pure): a request that names one of the rollout's
    versions gets that version's lane; the rest split by the hash of their key."""
    if rollout.canary is None:
        return "stable"
    if request.model_version is not None:
        if request.model_version == rollout.canary:
            return "canary"
        if request.model_version == rollout.stable:
            return "stable"
    if rollout.share <= 0:
        return "stable"
    key = request.tenant if rollout.key == "tenant" and request.tenant else request.request_id
    return lane_for(model, key, rollout.share)


def ready_versions(table: RegistryTable, now: datetime) -> dict[str, frozenset[str | None]]:
    """Worker group -> the versions its live members registered `ready` serve (pure)."""
    found: dict[str, set[str | None]] = {}
    for record in table.instances.values():
        if record.state == "ready" and is_live(record, now):
            for group in record.groups or [record.group]:
                found.setdefault(group, set()).add(record.model_version)
    return {group: frozenset(versions) for group, versions in found.items()}


class LaneRouter:
    """Ingest's split: the rollout in force, and canary lanes only while a canary worker of
    the tier is ready on the canary version, so a canary that cannot load never holds a
    request (nor does the worker of the canary before it, which keeps serving its version
    when the new one is refused)."""

    def __init__(
        self,
        rollouts: RolloutBook,
        registry: Callable[[], tuple[int, RegistryTable]],
        *,
        recheck_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._rollouts = rollouts
        self._registry = registry
        """() -> (a version that changes with the table, the registry table)."""
        self._recheck_s = recheck_s
        self._clock = clock
        self._ready: dict[str, frozenset[str | None]] = {}
        self._ready_at: tuple[int, float] | None = None

    def lane(self, request: InferenceRequest, config: ModelConfig, tier: Tier) -> Lane:
        """The lane this request is routed to; ModelNotFound for a request that names a
        version neither lane of the model's rollout serves (both are named)."""
        if config.rollout is None or config.rollout.canary is None:
            return "stable"
        rollout = effective(config.rollout, self._rollouts.get(config.name))
        wanted = request.model_version
        if wanted is not None and wanted not in (rollout.stable, rollout.canary):
            canary = f", the canary {rollout.canary!r}" if rollout.canary else ""
            raise ModelNotFound(
                f"model {config.name!r} version {wanted!r} is not served: the stable lane "
                f"serves {rollout.stable!r}{canary} (name one of them, or none)",
                model=config.name,
            )
        lane = choose_lane(rollout, config.name, request)
        if lane == "canary":
            serving = self._versions().get(worker_group(config.name, tier, "canary"), frozenset())
            if rollout.canary not in serving:
                return "stable"
        return lane

    def _versions(self) -> dict[str, frozenset[str | None]]:
        # Recomputed when the registry changes, and every recheck_s (leases lapse silently):
        # never per request.
        version, table = self._registry()
        now = self._clock()
        last = self._ready_at
        if last is None or last[0] != version or now - last[1] >= self._recheck_s:
            self._ready = ready_versions(table, datetime.now(UTC))
            self._ready_at = (version, now)
        return self._ready

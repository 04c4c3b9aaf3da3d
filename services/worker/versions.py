"""Which model version a worker serves: its lane's, by the rollout in force, or a pin."""

from __future__ import annotations

import logging

from infra.models.repository import ModelRepository
from infra.rollout.state import Effective, RolloutBook, effective, lane_version
from schemas.errors import InferbusError
from schemas.topics import Lane

log = logging.getLogger(__name__)


class NoCanary(InferbusError):
    """A canary worker for a model whose model.yaml names no canary."""


class LaneVersions:
    """The version wanted now for one model and lane (model.yaml's rollout with the latest
    decision on inferbus.rollouts folded over it), and the setting that names it."""

    def __init__(
        self,
        repository: ModelRepository,
        model: str,
        lane: Lane,
        *,
        pinned: str | None,
        rollouts: RolloutBook,
    ) -> None:
        self.repository = repository
        self.model = model
        self.lane = lane
        self.pinned = pinned
        self.rollouts = rollouts
        self._problem: str | None = None

    def rollout(self) -> Effective:
        """The rollout in force; ModelConfigError / ModelNotFound when model.yaml is bad."""
        config = self.repository.config(self.model)
        return effective(config.rollout, self.rollouts.get(self.model))

    def require(self) -> None:
        """At start: a canary worker needs a canary to serve (unless pinned)."""
        if self.lane == "canary" and self.pinned is None and self.rollout().canary is None:
            raise NoCanary(
                f"model {self.model!r} has no rollout.canary in model.yaml: a canary worker "
                "has no version to serve",
                model=self.model,
            )

    def wanted(self, current: str | None) -> str | None:
        """The version to serve (None: the newest complete one). While model.yaml cannot be
        read (an edit half-written) or names no canary any more, `current` stays."""
        try:
            rollout = self.rollout()
        except InferbusError as exc:
            if current is None:
                raise  # at start: the worker refuses, naming the problem
            if str(exc) != self._problem:
                log.warning("event=model_config_unreadable keeping=%s error=%s", current, exc)
            self._problem = str(exc)
            return current
        self._problem = None
        wanted = lane_version(rollout, self.lane)
        if wanted is None and self.lane == "canary":
            return current  # the canary is gone: the scaler retires this group once drained
        return wanted

    def setting(self) -> str | None:
        """The setting that chose the version, to name it when the version cannot load."""
        if self.pinned is not None:
            return "INFERBUS_WORKER_MODEL_VERSION"
        try:
            rollout = self.rollout()
        except InferbusError:
            return None  # the load fails on the same error, which names the problem
        if rollout.state is None:
            return None
        return "rollout.canary" if self.lane == "canary" else "rollout.stable"

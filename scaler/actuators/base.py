"""The actuator contract: read and set one worker group's replica count."""

from __future__ import annotations

import re
from abc import ABC, abstractmethod

from schemas.errors import InferbusError
from schemas.topics import TIERS, Tier

_GROUP_PREFIX = "inferbus.workers."


class ActuatorError(InferbusError):
    """The actuator could not read or change a group's replicas."""


def parse_group(group: str) -> tuple[str, Tier]:
    """`inferbus.workers.<model>.<tier>` to (model, tier); ActuatorError otherwise."""
    rest = group.removeprefix(_GROUP_PREFIX)
    model, _, tier = rest.rpartition(".")
    if rest == group or not model or tier not in TIERS:
        raise ActuatorError(f"{group!r} is not a worker group", group=group)
    return model, tier


def dns_label(*parts: str) -> str:
    """Join parts into a Kubernetes/compose-safe name: lower case, `-` only, at most 63 chars."""
    name = re.sub(r"[^a-z0-9-]+", "-", "-".join(parts).lower()).strip("-")
    return name[:63].rstrip("-")


class Actuator(ABC):
    """Sets the replicas of worker groups; one implementation per platform."""

    @abstractmethod
    async def current(self, group: str) -> int:
        """Replicas the platform runs (or is starting) for the group now."""

    @abstractmethod
    async def scale(self, group: str, replicas: int, reason: str) -> None:
        """Make the group run `replicas` workers; `reason` is the decision's one-line story."""

    @abstractmethod
    async def close(self) -> None:
        """Release what the actuator holds (idempotent)."""

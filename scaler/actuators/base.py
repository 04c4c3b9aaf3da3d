"""The actuator contract: read and set one worker group's replica count."""

from __future__ import annotations

import re
from abc import ABC, abstractmethod

from schemas.errors import InferbusError
from schemas.topics import GroupRef, parse_worker_group


class ActuatorError(InferbusError):
    """The actuator could not read or change a group's replicas."""


def parse_group(group: str) -> GroupRef:
    """`inferbus.workers.<model>[.canary].<tier>` to (model, tier, lane); ActuatorError
    otherwise."""
    parsed = parse_worker_group(group)
    if parsed is None:
        raise ActuatorError(f"{group!r} is not a worker group", group=group)
    return parsed


def canary_hint(group: str, name: str, what: str) -> str:
    """For a canary group the platform object is not made by inferbus: say which one it
    needs (empty for a stable group)."""
    if parse_group(group).lane == "stable":
        return ""
    return (
        f"; a canary group needs its own {what} {name!r}: a copy of the stable one with "
        "INFERBUS_WORKER_LANE=canary (docs/operations.md, Rolling out a model version)"
    )


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

"""Who consumes which partition: a balanced assignment of the live members, and the handover.

Pure. Every member computes the same assignment from the same view of the registry, so
there is no leader; a partition moves only when the member set changes, and only the
partitions that move pause. A member takes a partition only once no other live member
claims it, so a handover drains and commits before the new owner reads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from infra.assignment import balanced_assignment


@dataclass(frozen=True, slots=True)
class Member:
    """One live instance of a group as the registry shows it."""

    instance_id: str
    ready_at: float
    """When it became ready (epoch s): the older ones consume first, the newest stand by."""
    serving: bool
    """Ready and not draining: it may be given partitions."""
    owned: frozenset[int] = frozenset()
    """Partitions of the group's topic it consumes now."""


def active_members(members: Sequence[Member], desired: int | None) -> list[str]:
    """The members that consume: every serving one, or the `desired` longest-ready ones.

    The rest of the serving members are warm standbys: loaded and warmed, holding no
    partition, ready to take some within a handover instead of a cold start.
    """
    serving = sorted((m for m in members if m.serving), key=lambda m: (m.ready_at, m.instance_id))
    if desired is None:
        return [m.instance_id for m in serving]
    return [m.instance_id for m in serving[: max(desired, 0)]]


@dataclass(frozen=True, slots=True)
class Handover:
    """What one member does now with one group's partitions."""

    release: frozenset[int]
    """Owned but no longer its own: stop reading, finish what is in hand, commit, let go."""
    acquire: frozenset[int]
    """Its own and claimed by no other live member: read from the committed offset."""
    waiting: frozenset[int]
    """Its own but another live member still claims them (it is draining them)."""


def handover(
    me: str, owned: frozenset[int], target: frozenset[int], claims: Mapping[int, str]
) -> Handover:
    """The step from `owned` toward `target`; `claims`: partition -> other live claimant."""
    wanted = target - owned
    taken = frozenset(p for p in wanted if claims.get(p, me) != me)
    return Handover(release=owned - target, acquire=wanted - taken, waiting=taken)


def target_for(
    me: str, partitions: int, members: Sequence[Member], desired: int | None
) -> frozenset[int]:
    """This member's share of the group's partitions (empty while it stands by)."""
    active = active_members(members, desired)
    if me not in active:
        return frozenset()
    return balanced_assignment(partitions, active)[me]


def claims_of(members: Sequence[Member], me: str) -> dict[int, str]:
    """Partition -> the other live member that claims it."""
    out: dict[int, str] = {}
    for member in members:
        if member.instance_id == me:
            continue
        for partition in member.owned:
            out[partition] = member.instance_id
    return out

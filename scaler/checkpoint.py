"""A group's policy memory in its decision record, for a restart to start from.

A restart rebuilds the policy's memory by replaying the decision records (`recall.py`). A
replay starts with no memory, and until its burst memory is full it can decide otherwise
than the scaler did; what those decisions leave (a scale-down counted as a membership
change, the spare learned in the windows that change spoiled, a scale-down window's
recommendations) can carry on past the memory's reach, and through a shared budget into
other groups (docs/benchmarks.md, stop 57). So every `CHECKPOINT_EVERY_S` the scaler
writes each group's memory after the tick into that tick's records (`"state"`), and a
restart starts from the newest complete checkpoint and replays only the ticks after it.
Where there is none it can use, it replays from nothing, as before.

The memory is written field by field as `GroupState` has them, but for `group` (the
record's) and `last_signals` (the record's signals, which a checkpoint is only written
beside). A checkpoint whose fields are not exactly this version's (another version wrote
it) is not used: the restart replays instead of guessing a field.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scaler.signals import GroupSignals, GroupState, ScalerState, is_finite, is_json_number

CHECKPOINT_EVERY_S = 300.0
"""How often the scaler writes its memory beside its decisions (at the first tick after)."""


@dataclass(frozen=True)
class Checkpoint:
    """One group's memory after a tick, and every group the memory held then."""

    state: GroupState
    of_groups: frozenset[str]
    """The groups of the whole memory at that tick: the checkpoint is complete, and so
    usable, only where each of them has one at the same tick."""


def tick_checkpoints(
    state: ScalerState, signals: Sequence[GroupSignals]
) -> dict[str, dict[str, Any]] | None:
    """Each group's checkpoint for the records of a tick decided on `signals` that left
    `state`; None where the memory could not be started from them: a group it holds that
    was not collected at the tick, or one decided on other signals (stale: its last
    signals are older than the record's), or where it holds none."""
    collected = {s.group: s for s in signals}
    groups = [g.group for g in state.groups]
    if not groups or set(groups) != set(collected):
        return None
    if any(g.last_signals != collected[g.group] for g in state.groups):
        return None
    return {g.group: checkpoint_to_dict(g, groups) for g in state.groups}


def checkpoint_due(now: float, last_at: float | None) -> bool:
    """A checkpoint is written at the first tick `CHECKPOINT_EVERY_S` after the last one."""
    return last_at is None or now - last_at >= CHECKPOINT_EVERY_S


def _number(value: Any) -> float:
    if not is_json_number(value) or not is_finite(value):
        raise ValueError("not a finite number")
    return float(value)


def _count(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError("not a count")
    return value


def _optional(read: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda value: None if value is None else read(value)


def _pairs(second: Callable[[Any], Any]) -> Callable[[Any], tuple[tuple[float, Any], ...]]:
    def read(value: Any) -> tuple[tuple[float, Any], ...]:
        if not isinstance(value, list):
            raise ValueError("not a list")
        pairs = []
        for pair in value:
            if not isinstance(pair, list) or len(pair) != 2:
                raise ValueError("not a list of [t, value] pairs")
            pairs.append((_number(pair[0]), second(pair[1])))
        return tuple(pairs)

    return read


def _lag(value: Any) -> tuple[float, int]:
    if not isinstance(value, list) or len(value) != 2:
        raise ValueError("not [t, lag]")
    return _number(value[0]), _count(value[1])


_READERS: Mapping[str, Callable[[Any], Any]] = {
    "arrival_samples": _pairs(_number),
    "recommendations": _pairs(_count),
    "failed_collections": _count,
    "last_ready_replicas": _optional(_count),
    "observed_since": _optional(_number),
    "last_scale_down_at": _optional(_number),
    "last_step_down_at": _optional(_number),
    "load_samples": _pairs(_number),
    "service_rps_per_replica": _optional(_number),
    "last_lag": _optional(_lag),
    "last_change_at": _optional(_number),
    "spare_samples": _pairs(_number),
    "pending_downs": _pairs(_count),
    "hold_factor": _number,
}
"""How each written field of `GroupState` is read back (`group` and `last_signals` are the
record's own)."""

_NOT_WRITTEN = ("group", "last_signals")


def checkpoint_to_dict(state: GroupState, of_groups: Sequence[str]) -> dict[str, Any]:
    """The JSON of `state` for a decision record's `"state"` (`checkpoint_from_dict`)."""
    fields = {
        f.name: getattr(state, f.name)
        for f in dataclasses.fields(state)
        if f.name not in _NOT_WRITTEN
    }
    return {"fields": fields, "of_groups": sorted(of_groups)}


def checkpoint_from_dict(raw: Any, *, group: str, signals: GroupSignals) -> Checkpoint | str:
    """The checkpoint in a record of `group` written beside `signals`, or why it is not
    one this version can start from."""
    if not isinstance(raw, dict) or set(raw) != {"fields", "of_groups"}:
        return "a checkpoint not of this version"
    fields, of_groups = raw["fields"], raw["of_groups"]
    if not isinstance(fields, dict) or set(fields) != set(_READERS):
        return "a checkpoint not of this version"
    if not isinstance(of_groups, list) or not all(isinstance(g, str) for g in of_groups):
        return "a checkpoint whose 'of_groups' is not a list of group names"
    if group not in of_groups:
        return "a checkpoint whose 'of_groups' lacks its own group"
    values: dict[str, Any] = {}
    for name, read in _READERS.items():
        try:
            values[name] = read(fields[name])
        except ValueError as exc:
            return f"a checkpoint's {name!r} unreadable ({exc})"
    state = GroupState(group=group, last_signals=signals, **values)
    return Checkpoint(state, frozenset(of_groups))

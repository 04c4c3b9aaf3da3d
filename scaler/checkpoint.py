"""A group's memory in its decision record, for a restart to start from.

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
beside), with the policy's name and a digest of its configuration: a memory is only
started from by the policy, configured alike, that built it. A checkpoint whose fields
are not exactly this version's, or whose values the scaler could not have written, is
not used: the restart replays instead of guessing a field.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scaler.config import PolicyConfig
from scaler.signals import GroupSignals, GroupState, ScalerState, is_finite, is_json_number

CHECKPOINT_EVERY_S = 300.0
"""How often the scaler writes its memory beside its decisions (at the first tick after)."""

CHECKPOINT_RETRY_S = 30.0
"""After a checkpoint tick whose records could not all be written, when to try again (a
checkpoint forces every group's record, and a broker away fails them all)."""

_KEYS = frozenset({"fields", "of_groups", "policy", "config"})


@dataclass(frozen=True)
class Checkpoint:
    """One group's memory after a tick, and every group the memory held then."""

    state: GroupState
    of_groups: frozenset[str]
    """The groups of the whole memory at that tick: the checkpoint is complete, and so
    usable, only where each of them has one at the same tick."""
    policy: str
    config: str
    """`config_digest` of the configuration the memory was built under."""


def config_digest(config: PolicyConfig) -> str:
    """A short digest of every setting of `config`: memories built under other settings
    (another window, another memory length) are not started from. Numbers are hashed as
    floats: a settings file's 1800 is the default's 1800.0."""
    values = {
        name: float(v) if isinstance(v, int) and not isinstance(v, bool) else v
        for name, v in dataclasses.asdict(config).items()
    }
    text = json.dumps(values, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _decided(state: ScalerState) -> list[GroupState]:
    """The groups the policy decides: a recalled group not collected yet (no last signals,
    `recall.to_resume`) only waits, and no checkpoint can carry it."""
    return [g for g in state.groups if g.last_signals is not None]


def _left_by(state: GroupState, signals: GroupSignals) -> bool:
    """`state` is what a decision on `signals` left: its last signals are them, or, where
    the collector could not read the group and gave its last signals again flagged stale,
    the ones they repeat. The policy keeps those (it learns nothing from stale ones) and
    reads them only flagged stale (`pipeline.py`'s vanished groups), so a memory started
    from the repeat decides as the one that kept the original."""
    last = state.last_signals
    return last == signals or (signals.stale and last == dataclasses.replace(signals, stale=False))


def why_no_checkpoint(state: ScalerState, signals: Sequence[GroupSignals]) -> str | None:
    """Why the memory a tick decided on `signals` left (`state`) cannot be started from its
    records (None: it can): every group it decides must have been collected at the tick
    and its memory left by a decision on those signals (`_left_by`)."""
    collected = {s.group: s for s in signals}
    decided = _decided(state)
    if not decided:
        return "no group in the memory"
    missing = sorted(g.group for g in decided if g.group not in collected)
    if missing:
        return f"not collected at this tick: {','.join(missing)}"
    older = sorted(g.group for g in decided if not _left_by(g, collected[g.group]))
    if older:
        return f"decided on older signals: {','.join(older)}"
    return None


def tick_checkpoints(
    state: ScalerState, signals: Sequence[GroupSignals], *, policy: str, config: str
) -> dict[str, dict[str, Any]] | str:
    """Each decided group's checkpoint for the records of a tick decided on `signals` that
    left `state`, or why there is none (`why_no_checkpoint`; or a value that would not read
    back, a NaN that JSON writes but this module refuses). A group waiting for its first
    collection since a restart is left out: a restart from this checkpoint forgets it, as
    a replay forgets a group with no records."""
    why = why_no_checkpoint(state, signals)
    if why is not None:
        return why
    collected = {s.group: s for s in signals}
    decided = _decided(state)
    groups = [g.group for g in decided]
    written = {
        g.group: checkpoint_to_dict(g, groups, policy=policy, config=config) for g in decided
    }
    for name, raw in written.items():
        back = checkpoint_from_dict(
            json.loads(json.dumps(raw)), group=name, signals=collected[name]
        )
        if isinstance(back, str):
            return f"{name} would not read back: {back}"
    return written


def checkpoint_due(now: float, last_at: float | None) -> bool:
    """A checkpoint is written at the first tick `CHECKPOINT_EVERY_S` after the last one,
    or at once where the clock is now before it (a clock stepped back would otherwise
    put the next one off by the step)."""
    return last_at is None or not 0 <= now - last_at < CHECKPOINT_EVERY_S


def _number(value: Any) -> float:
    if not is_json_number(value) or not is_finite(value):
        raise ValueError("not a finite number")
    return float(value)


def _number_where(holds: Callable[[float], bool], otherwise: str) -> Callable[[Any], float]:
    """A reader of finite numbers for which `holds`; `otherwise` says why one is refused."""

    def read(value: Any) -> float:
        number = _number(value)
        if not holds(number):
            raise ValueError(otherwise)
        return number

    return read


_not_negative = _number_where(lambda x: x >= 0, "negative")
_positive = _number_where(lambda x: x > 0, "not above 0")
_at_least_one = _number_where(lambda x: x >= 1, "under 1")


def _count(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError("not a count")
    if not is_finite(value) or value < 0:
        raise ValueError("not a count a float can hold")
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
    "arrival_samples": _pairs(_not_negative),
    "recommendations": _pairs(_count),
    "failed_collections": _count,
    "last_ready_replicas": _optional(_count),
    "observed_since": _optional(_number),
    "last_scale_down_at": _optional(_number),
    "last_step_down_at": _optional(_number),
    "load_samples": _pairs(_not_negative),
    "service_rps_per_replica": _optional(_positive),
    "last_lag": _optional(_lag),
    "last_change_at": _optional(_number),
    "spare_samples": _pairs(_not_negative),
    "pending_downs": _pairs(_count),
    "hold_factor": _at_least_one,
}
"""How each written field of `GroupState` is read back (`group` and `last_signals` are the
record's own), within what the policy writes there."""

_NOT_WRITTEN = ("group", "last_signals")


def checkpoint_to_dict(
    state: GroupState, of_groups: Sequence[str], *, policy: str, config: str
) -> dict[str, Any]:
    """The JSON of `state` for a decision record's `"state"` (`checkpoint_from_dict`)."""
    fields = {
        f.name: getattr(state, f.name)
        for f in dataclasses.fields(state)
        if f.name not in _NOT_WRITTEN
    }
    return {"fields": fields, "of_groups": sorted(of_groups), "policy": policy, "config": config}


def checkpoint_from_dict(raw: Any, *, group: str, signals: GroupSignals) -> Checkpoint | str:
    """The checkpoint in a record of `group` written beside `signals`, or why it is not
    one this version can start from."""
    if not isinstance(raw, dict) or set(raw) != _KEYS:
        return "a checkpoint not of this version"
    fields, of_groups = raw["fields"], raw["of_groups"]
    if not isinstance(fields, dict) or set(fields) != set(_READERS):
        return "a checkpoint not of this version"
    if not isinstance(raw["policy"], str) or not isinstance(raw["config"], str):
        return "a checkpoint whose 'policy' or 'config' is not a string"
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
    return Checkpoint(state, frozenset(of_groups), raw["policy"], raw["config"])

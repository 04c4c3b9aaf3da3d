"""Snapshot files: `GroupSignals` as JSON, and the `scaler decide` input with its history."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scaler.signals import (
    NOT_FINITE,
    GroupSignals,
    GroupState,
    ScalerState,
    SignalsError,
    is_finite,
    is_json_number,
    read_json_file,
    shown,
)

_FIELDS = {f.name: f for f in dataclasses.fields(GroupSignals)}
_REQUIRED = frozenset(
    name
    for name, f in _FIELDS.items()
    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
)
_INT_FIELDS = frozenset(
    {
        "replicas",
        "ready_replicas",
        "starting_replicas",
        "partitions",
        "lag",
        "min_replicas",
        "max_replicas",
        "warm_replicas",
        "standby_replicas",
        "standby_ready_replicas",
    }
)
_STR_FIELDS = frozenset({"group", "model", "tier"})
_NON_NEGATIVE = frozenset(
    {
        "arrival_rps",
        "service_rps_per_replica",
        "achieved_batch_size",
        "lag",
        "oldest_age_ms",
        "queue_p99_ms",
        "engine_p99_ms",
        "e2e_p99_ms",
        "time_to_ready_s",
        "warm_replicas",
    }
)
"""Measured rates, counts and times a snapshot may leave out but never give below 0."""


def _coerce(group: str, name: str, value: Any) -> Any:
    """Check one snapshot field's JSON type; ints stay ints, numbers become floats."""
    if value is None:
        if name in _REQUIRED:
            raise SignalsError(f"field {name!r} is required and cannot be null", group=group)
        return None
    if name in _STR_FIELDS:
        if not isinstance(value, str) or not value.strip():
            raise SignalsError(f"field {name!r} must be a non-empty string", group=group)
        return value
    if name == "stale":
        if not isinstance(value, bool):
            raise SignalsError("field 'stale' must be true or false", group=group)
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SignalsError(f"field {name!r} must be a number, got {value!r}", group=group)
    if not is_finite(value):
        raise SignalsError(f"field {name!r} {NOT_FINITE}, got {shown(value)}", group=group)
    if name in _NON_NEGATIVE and value < 0:
        raise SignalsError(f"field {name!r} must be >= 0, got {value!r}", group=group)
    if name in _INT_FIELDS:
        if value != int(value):
            raise SignalsError(f"field {name!r} must be a whole number", group=group)
        return int(value)
    return float(value)


def signals_from_dict(raw: Mapping[str, Any]) -> GroupSignals:
    """Build GroupSignals from a JSON object; unknown or missing fields raise SignalsError."""
    group = str(raw.get("group", "<unnamed>"))
    unknown = sorted(set(raw) - set(_FIELDS))
    if unknown:
        raise SignalsError(
            f"unknown field(s) {unknown}; known fields: {sorted(_FIELDS)}", group=group
        )
    missing = sorted(_REQUIRED - set(raw))
    if missing:
        raise SignalsError(f"missing required field(s) {missing}", group=group)
    values = {name: _coerce(group, name, value) for name, value in raw.items()}
    return GroupSignals(**values)


def signals_to_dict(signals: GroupSignals) -> dict[str, Any]:
    """JSON-ready form of a snapshot (inverse of `signals_from_dict`)."""
    return dataclasses.asdict(signals)


@dataclass(frozen=True)
class Snapshot:
    """A `scaler decide` input: the groups, the policy clock, and optional arrival history."""

    signals: tuple[GroupSignals, ...]
    now: float
    state: ScalerState


def _sample_problem(point: Any) -> str | None:
    """Why one history sample is not `[t, rps]` with both finite and rps >= 0, or None."""
    if not (isinstance(point, list) and len(point) == 2 and all(map(is_json_number, point))):
        return "must be [t, rps], two numbers"
    t, rps = point
    if not is_finite(t):
        return f"t {NOT_FINITE}"
    if not is_finite(rps):
        return f"rps {NOT_FINITE}"
    if rps < 0:
        return "rps must be >= 0"
    return None


def _history(raw: Any, path: Path) -> ScalerState:
    """`{"group": [[t, rps], ...]}` seeds the forecast and the burst memory, as if those
    earlier ticks had run."""
    if not isinstance(raw, dict):
        raise SignalsError(f"{path}: 'history' must map group names to [[t, rps], ...]")
    groups = []
    for group, samples in raw.items():
        if not isinstance(samples, list):
            raise SignalsError(f"{path}: history of {group!r} must be [[t, rps], ...]")
        for index, point in enumerate(samples):
            problem = _sample_problem(point)
            if problem is not None:
                raise SignalsError(
                    f"{path}: history of {group!r}, sample {index} {shown(point)}: {problem}"
                )
        points = tuple(sorted((float(t), float(v)) for t, v in samples))
        since = points[0][0] if points else None
        groups.append(GroupState(group=group, arrival_samples=points, observed_since=since))
    return ScalerState(groups=tuple(groups))


def _with_loads(state: ScalerState, signals: Sequence[GroupSignals]) -> ScalerState:
    """History also seeds the burst memory: rps over the group's per-replica throughput."""
    mus = {s.group: s.service_rps_per_replica for s in signals}
    groups = []
    for g in state.groups:
        mu = mus.get(g.group)
        loads = tuple((t, v / mu) for t, v in g.arrival_samples) if mu else ()
        groups.append(dataclasses.replace(g, load_samples=loads, service_rps_per_replica=mu))
    return ScalerState(groups=tuple(groups))


def load_snapshot(path: Path) -> Snapshot:
    """Read a snapshot: a group object, a list of them, or `{"now", "groups", "history"}`.

    `now` defaults to the newest `collected_at`, so an old file is not stale by itself.
    """
    raw = read_json_file(path)
    now: Any = None
    state = ScalerState()
    if isinstance(raw, dict) and "groups" in raw:
        extra = sorted(set(raw) - {"groups", "now", "history", "comment"})
        if extra:
            raise SignalsError(f"{path}: unknown top-level field(s) {extra}")
        now = raw.get("now")
        if "history" in raw:
            state = _history(raw["history"], path)
        raw = raw["groups"]
    items: Sequence[Any] = raw if isinstance(raw, list) else [raw]
    if not items or not all(isinstance(item, dict) for item in items):
        raise SignalsError(f"{path} must hold a group object or a non-empty list of them")
    signals = tuple(signals_from_dict(item) for item in items)
    names = [s.group for s in signals]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise SignalsError(f"{path}: group(s) {twice} given more than once")
    unknown = sorted({g.group for g in state.groups} - set(names))
    if unknown:
        raise SignalsError(f"{path}: history for group(s) {unknown} that the snapshot lacks")
    state = _with_loads(state, signals)
    if now is None:
        now = max(s.collected_at for s in signals)
    elif not is_json_number(now) or not is_finite(now):
        raise SignalsError(f"{path}: 'now' must be a finite number of seconds, got {shown(now)}")
    ahead = [s.group for s in signals if s.collected_at > now]
    if ahead:
        raise SignalsError(f"{path}: collected_at of {ahead} is after 'now' ({now})")
    unready = [s.group for s in signals if (s.newest_ready_at or -math.inf) > s.collected_at]
    if unready:
        # A replica ready after the snapshot was taken: it could not have been seen ready.
        raise SignalsError(f"{path}: newest_ready_at of {unready} is after their collected_at")
    future = _history_after(state, now)
    if future:
        raise SignalsError(f"{path}: history of {future} has samples after 'now' ({now})")
    return Snapshot(signals=signals, now=float(now), state=state)


def _history_after(state: ScalerState, now: float) -> list[str]:
    """Groups whose history holds a sample later than `now` (a sample not yet taken)."""
    return [g.group for g in state.groups if any(t > now for t, _ in g.arrival_samples)]

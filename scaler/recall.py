"""A restarted scaler's memory: its own decision records, replayed through the policy.

The policy is a pure function of the signals it has seen (`decide(signals, state, config,
now)`), and every decision record on `inferbus.scaler.decisions` carries the signals it was
decided on. So the state a scaler built over the last half hour (arrival samples, the
burst memory and a schedule read from it, the learned spare) is rebuilt by running the
policy again over those records, in their order; what only older records taught it (the
regret factor's earlier verdicts) starts over. A scaler that restarts (an upgrade, a
crash, a node drain) then meets the next burst as its predecessor would have, instead of
relearning bursts and schedules from nothing.

Pure: records in, state out; `recall_reader.py` reads the records.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scaler.actuators.decisions import DECISION_SCHEMA_VERSION, is_idle
from scaler.config import PolicyConfig
from scaler.policy.pipeline import PolicyFn
from scaler.signals import GroupSignals, ScalerState, SignalsError, is_finite, is_json_number
from scaler.snapshot import signals_from_dict


@dataclass(frozen=True)
class Recorded:
    """One decision record's input: when it was written and the signals decided on."""

    at: float
    signals: GroupSignals


@dataclass(frozen=True)
class RecalledTick:
    """The signals of every group one scaler tick decided on, as the policy saw them."""

    at: float
    signals: tuple[GroupSignals, ...]


@dataclass(frozen=True)
class Recall:
    """What the records gave: the rebuilt state, and what was left out and why."""

    state: ScalerState
    ticks: int
    records: int
    skipped: Mapping[str, int]
    """Records not replayed, by reason (`recorded`)."""
    dropped: tuple[str, ...]
    """Groups replayed but left out of the state: the scaler no longer runs them."""
    since: float | None
    """The first replayed tick's time; None when nothing was replayed."""


def recorded(raw: Any) -> Recorded | str:
    """A decision record's time and signals, or why it cannot be replayed (a short reason)."""
    if not isinstance(raw, dict):
        return "not a JSON object"
    if raw.get("schema_version") != DECISION_SCHEMA_VERSION:
        return "another schema version"
    at: Any = raw.get("at")
    signals = raw.get("signals")
    if not is_json_number(at) or not is_finite(at):
        return "no finite 'at'"
    if signals is None:
        return "no signals (the group was not collected)"
    if not isinstance(signals, dict):
        return "signals not an object"
    try:
        return Recorded(float(at), signals_from_dict(signals))
    except SignalsError:
        return "signals the policy would refuse"


def ticks_of(
    records: Iterable[Recorded], *, since: float, interval_s: float, idle_every_s: float
) -> list[RecalledTick]:
    """The records at or after `since` regrouped into the ticks that wrote them, in order.

    A tick writes its groups' records one after another; a group's second record, or one
    more than half an interval after the tick's first, opens the next tick. A record written
    twice (two scalers, or a retried send) counts once. An idle group's hold on the same
    signals is written only every `idle_every_s` (`worth_writing`): on the ticks between,
    it is given its last record's signals again, moved to the tick's time, and where every
    group was idle, those ticks (one every `interval_s`) are given back whole. A busy group
    with no record, or an idle one's silence past `idle_every_s`, was not a tick: the
    scaler was away.
    """
    ordered = sorted(
        {(r.at, r.signals.group): r for r in records if r.at >= since}.values(),
        key=lambda r: r.at,
    )
    ticks: list[RecalledTick] = []
    last: dict[str, Recorded] = {}
    order: dict[str, int] = {}
    for written in _written_ticks(ordered, interval_s / 2):
        at = written[0].at
        if ticks:
            ticks.extend(_quiet_ticks(ticks[-1], at, last, interval_s, idle_every_s))
        seen = {r.signals.group for r in written}
        refilled = [
            _moved(r, at)
            for name, r in last.items()
            if name not in seen and _holds(r, at, idle_every_s, interval_s)
        ]
        for r in written:
            last[r.signals.group] = r
            order.setdefault(r.signals.group, len(order))
        # The groups in the order the scaler wrote them, a refilled one in its place.
        signals = sorted((*(r.signals for r in written), *refilled), key=lambda s: order[s.group])
        ticks.append(RecalledTick(at, tuple(signals)))
    return ticks


def _written_ticks(ordered: Sequence[Recorded], spread_s: float) -> list[list[Recorded]]:
    """Records in time order, split where a tick's writing ends."""
    grouped: list[list[Recorded]] = []
    for record in ordered:
        current = grouped[-1] if grouped else None
        if (
            current is None
            or record.at - current[0].at > spread_s
            or any(r.signals.group == record.signals.group for r in current)
        ):
            grouped.append([record])
        else:
            current.append(record)
    return grouped


def _holds(record: Recorded, at: float, idle_every_s: float, interval_s: float) -> bool:
    """A hold left out at `at` would have said what `record` said: `record` was idle, and
    `at` came before the next one was due (`worth_writing`; to within half an interval,
    the records' times being their writing's, not their tick's)."""
    return is_idle(record.signals) and at - record.at < idle_every_s + interval_s / 2


def _quiet_ticks(
    previous: RecalledTick,
    until: float,
    last: Mapping[str, Recorded],
    interval_s: float,
    idle_every_s: float,
) -> list[RecalledTick]:
    """The ticks between `previous` and `until` at which every group held idle unwritten."""
    quiet: list[RecalledTick] = []
    at = previous.at + interval_s
    while at < until - interval_s / 2:
        records = [last[s.group] for s in previous.signals]
        if not all(_holds(r, at, idle_every_s, interval_s) for r in records):
            break
        quiet.append(RecalledTick(at, tuple(_moved(r, at) for r in records)))
        at += interval_s
    return quiet


def _moved(record: Recorded, at: float) -> GroupSignals:
    """An idle group's last signals as a later tick would have collected them."""
    shift = at - record.at
    s = record.signals
    return dataclasses.replace(s, collected_at=s.collected_at + shift)


def replay(ticks: Sequence[RecalledTick], policy: PolicyFn, config: PolicyConfig) -> ScalerState:
    """The state the policy ends with after deciding `ticks` in order, from an empty one."""
    state = ScalerState()
    for tick in ticks:
        _, state = policy(tick.signals, state, config, tick.at)
    return state


def recall(
    raws: Iterable[Any],
    policy: PolicyFn,
    config: PolicyConfig,
    *,
    since: float,
    until: float,
    interval_s: float,
    idle_every_s: float,
    groups: Iterable[str] | None = None,
) -> Recall:
    """Replay the decision records written from `since` to `until` (now); keep `groups`
    (None: all) of the state. Every group is replayed: the budget the policy shared between
    them was shared with the groups gone since, too. A record from after `until` came from
    a clock ahead of this one (another host's) and would sit in the memory as a future."""
    skipped: dict[str, int] = {}
    kept: list[Recorded] = []
    total = 0
    for raw in raws:
        total += 1
        got = recorded(raw)
        if isinstance(got, str):
            why = got
        elif got.at < since:
            why = "older than the memory"
        elif got.at > until:
            why = "written after now (a clock ahead of this one)"
        else:
            kept.append(got)
            continue
        skipped[why] = skipped.get(why, 0) + 1
    ticks = ticks_of(kept, since=since, interval_s=interval_s, idle_every_s=idle_every_s)
    state = replay(ticks, policy, config)
    wanted = None if groups is None else set(groups)
    return Recall(
        state=ScalerState(
            groups=tuple(g for g in state.groups if wanted is None or g.group in wanted)
        ),
        ticks=len(ticks),
        records=total,
        skipped=skipped,
        dropped=tuple(
            sorted(g.group for g in state.groups if wanted is not None and g.group not in wanted)
        ),
        since=ticks[0].at if ticks else None,
    )


def memory_s(config: PolicyConfig) -> float:
    """How far back the policy's memory reaches: what a restart reads again."""
    return max(config.burst_memory_s, config.headroom_memory_s, config.forecast_window_s)

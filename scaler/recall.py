"""A restarted scaler's memory: its own decision records, replayed through the policy.

The policy is a pure function of the signals it has seen (`decide(signals, state, config,
now)`), and every decision record on `inferbus.scaler.decisions` carries the signals it was
decided on and the tick's clock (`tick_at`). So the state a scaler built over the last half
hour (arrival samples, the burst memory and a schedule read from it, the learned spare) is
rebuilt by running the policy again over those records, tick by tick; what only older
records taught it (the regret factor's earlier verdicts) starts over, unless a checkpoint
(below) carries it. A scaler that
restarts (an upgrade, a crash, a node drain) then meets the next burst as its predecessor
would have, instead of relearning bursts and schedules from nothing.

Every few minutes the records also carry each group's memory after the tick
(`checkpoint.py`): the replay then starts from the newest complete checkpoint that this
policy wrote under these settings, and replays only the ticks after it, which gives the
memory exactly, where a replay from nothing can decide otherwise until its burst memory
is full.

Pure: records in, state out; `recall_reader.py` reads the records.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scaler.actuators.decisions import DECISION_SCHEMA_VERSION, is_idle
from scaler.checkpoint import Checkpoint, checkpoint_from_dict, config_digest
from scaler.config import PolicyConfig
from scaler.policy.pipeline import PolicyFn
from scaler.signals import GroupSignals, ScalerState, SignalsError, is_finite, is_json_number
from scaler.snapshot import signals_from_dict


@dataclass(frozen=True)
class Recorded:
    """One decision record's input: its tick's time, its group and the signals."""

    at: float
    """The tick's clock (`tick_at`); a record written before it had one: when it was
    written, within a moment of its tick."""
    group: str
    signals: GroupSignals | None
    """None: the group was not collected at that tick (the policy decided it stale)."""
    exact: bool
    """`at` is the tick's own clock, the same in every record of the tick."""
    checkpoint: Checkpoint | None = None
    """The group's memory after the tick, where the record carries one (`checkpoint.py`)."""
    checkpoint_problem: str | None = None
    """Why the record's checkpoint cannot be started from (the record is replayed)."""


@dataclass(frozen=True)
class PolicyTick:
    """One scaler tick as the policy saw it: its time, the signals of every group collected
    and the groups decided (a group not collected is decided on its last signals, stale)."""

    at: float
    signals: tuple[GroupSignals, ...]
    groups: frozenset[str]


@dataclass(frozen=True)
class Recall:
    """What the records gave: the rebuilt state, and what was left out and why."""

    state: ScalerState
    ticks: int
    """Ticks the records hold, those before the checkpoint started from included."""
    read: int
    """Records read, those left out included."""
    skipped: Mapping[str, int]
    """Records not replayed, by reason (`recorded`, `recall`)."""
    dropped: tuple[str, ...]
    """Groups replayed but left out of the state: the scaler no longer runs them."""
    since: float | None
    """The first tick's time the records hold; None when they hold none."""
    from_checkpoint: float | None = None
    """The tick whose checkpoint the replay started from; None: it started from nothing."""
    checkpoint_problems: Mapping[str, int] = dataclasses.field(default_factory=dict)
    """Checkpoints that could not be started from, by reason (their records replayed)."""


@dataclass(frozen=True)
class Unreadable:
    """A record on the decisions topic whose value is no JSON at all (`recall_reader.py`)."""

    why: str


def _time(value: Any) -> float | None:
    return float(value) if is_json_number(value) and is_finite(value) else None


def recorded(raw: Any) -> Recorded | str:
    """A decision record's tick time, group and signals, or why it cannot be replayed."""
    if isinstance(raw, Unreadable):
        return raw.why
    if not isinstance(raw, dict):
        return "not a JSON object"
    if raw.get("schema_version") != DECISION_SCHEMA_VERSION:
        return "another schema version"
    tick_at, at = _time(raw.get("tick_at")), _time(raw.get("at"))
    if tick_at is None and at is None:
        return "no finite 'tick_at' or 'at'"
    group, signals = raw.get("group"), raw.get("signals")
    if not isinstance(group, str):
        return "no group"
    when = tick_at if tick_at is not None else at
    assert when is not None
    if signals is None:
        return Recorded(when, group, None, exact=tick_at is not None)
    if not isinstance(signals, dict):
        return "signals not an object"
    try:
        parsed = signals_from_dict(signals)
    except SignalsError:
        return "signals the policy would refuse"
    if parsed.group != group:
        return "signals of another group"
    record = Recorded(when, group, parsed, exact=tick_at is not None)
    if raw.get("state") is None:
        return record
    if tick_at is None:
        return dataclasses.replace(record, checkpoint_problem="a checkpoint without 'tick_at'")
    got = checkpoint_from_dict(raw["state"], group=group, signals=parsed)
    if isinstance(got, str):
        return dataclasses.replace(record, checkpoint_problem=got)
    return dataclasses.replace(record, checkpoint=got)


def ticks_of(
    records: Iterable[Recorded],
    *,
    interval_s: float,
    idle_every_s: float,
    until: float = -math.inf,
) -> list[PolicyTick]:
    """The records regrouped into the ticks that wrote them, in order.

    Records with the tick's clock (`tick_at`) are grouped by it. Older ones were written one
    after another: a group's second record, or one more than half an interval after the
    tick's first, opens the next tick. A record written twice counts once. An idle group's
    hold on the same signals is written at most every `idle_every_s` (`worth_writing`): on
    the ticks between, it is given its last record's signals again, moved to the tick's
    time, and where every group was idle, those ticks (one every `interval_s`) are given
    back whole, after the last record too, up to `until` (the restart). A busy group with
    no record, or an idle one's silence past `idle_every_s`, was no tick: the scaler was
    away.
    """
    ordered = sorted({(r.at, r.group): r for r in records}.values(), key=lambda r: r.at)
    ticks: list[PolicyTick] = []
    last: dict[str, Recorded] = {}
    order: dict[str, int] = {}
    for written in _written_ticks(ordered, interval_s / 2):
        at = written[0].at
        if ticks:
            ticks.extend(
                _quiet_ticks(
                    ticks[-1],
                    at,
                    last=last,
                    order=order,
                    interval_s=interval_s,
                    idle_every_s=idle_every_s,
                )
            )
        seen = {r.group for r in written}
        refilled = [
            _moved(r, at)
            for name, r in last.items()
            if name not in seen and _holds(r, at, idle_every_s, interval_s)
        ]
        for r in written:
            last[r.group] = r
            order.setdefault(r.group, len(order))
        # The groups in the order the scaler wrote them, a refilled one in its place.
        present = sorted((*written, *refilled), key=lambda r: order[r.group])
        ticks.append(_tick(at, present))
    if ticks:
        ticks.extend(
            _quiet_ticks(
                ticks[-1],
                until + interval_s,
                last=last,
                order=order,
                interval_s=interval_s,
                idle_every_s=idle_every_s,
            )
        )
    return ticks


def _tick(at: float, records: Sequence[Recorded]) -> PolicyTick:
    signals = tuple(r.signals for r in records if r.signals is not None)
    return PolicyTick(at, signals, frozenset(r.group for r in records))


def _written_ticks(ordered: Sequence[Recorded], spread_s: float) -> list[list[Recorded]]:
    """Records in time order, split where a tick's writing ends."""
    grouped: list[list[Recorded]] = []
    for record in ordered:
        current = grouped[-1] if grouped else None
        if current is None or any(r.group == record.group for r in current):
            grouped.append([record])
            continue
        first = current[0]
        same = (
            record.at == first.at
            if record.exact and first.exact
            else record.at - first.at <= spread_s
        )
        if same:
            current.append(record)
        else:
            grouped.append([record])
    return grouped


def _holds(record: Recorded, at: float, idle_every_s: float, interval_s: float) -> bool:
    """A hold left out at `at` would have said what `record` said: `record` was idle, and
    `at` came before the next one was due (`worth_writing`; within half an interval, for
    records timed by their writing)."""
    return (
        record.signals is not None
        and is_idle(record.signals)
        and at - record.at < idle_every_s + interval_s / 2
    )


def _quiet_ticks(
    previous: PolicyTick,
    until: float,
    *,
    last: Mapping[str, Recorded],
    order: Mapping[str, int],
    interval_s: float,
    idle_every_s: float,
) -> list[PolicyTick]:
    """The ticks between `previous` and `until` at which every group of `previous` held
    idle, unwritten: each given its `last` record again, in the order they were written."""
    records = [last[g] for g in sorted(previous.groups, key=order.__getitem__)]
    quiet: list[PolicyTick] = []
    at = previous.at + interval_s
    while at < until - interval_s / 2:
        if not all(_holds(r, at, idle_every_s, interval_s) for r in records):
            break
        quiet.append(_tick(at, [_moved(r, at) for r in records]))
        at += interval_s
    return quiet


def _moved(record: Recorded, at: float) -> Recorded:
    """An idle hold given again at a later tick: its signals as that tick collected them."""
    s = record.signals
    assert s is not None
    later = dataclasses.replace(s, collected_at=s.collected_at + at - record.at)
    return dataclasses.replace(record, at=at, signals=later)


def replay(
    ticks: Sequence[PolicyTick],
    policy: PolicyFn,
    config: PolicyConfig,
    *,
    forget_after_s: float = math.inf,
    start: ScalerState | None = None,
    start_at: float = -math.inf,
) -> ScalerState:
    """The state the policy ends with after deciding `ticks` in order, from `start` (a
    checkpoint's, as of the tick at `start_at`; by default none).

    A group with no record for `forget_after_s` is forgotten, as the scaler forgets a group
    it retired or stopped running: decided stale on its last signals tick after tick, it
    would hold a share of the budget that no tick gave it.
    """
    state = start if start is not None else ScalerState()
    seen: dict[str, float] = dict.fromkeys((g.group for g in state.groups), start_at)
    for tick in ticks:
        seen.update(dict.fromkeys(tick.groups, tick.at))
        kept = tuple(g for g in state.groups if tick.at - seen[g.group] <= forget_after_s)
        if len(kept) < len(state.groups):
            state = ScalerState(groups=kept)
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
    acting: bool = True,
    groups: Iterable[str] | None = None,
    policy_name: str,
) -> Recall:
    """Replay the decision records of ticks from `since` to `until` (now); keep `groups`
    (None: all) of the state. `policy` is named `policy_name`: only a checkpoint that policy
    wrote under this `config` is started from (`checkpoint.py`).

    Only the records of a scaler like this one (`acting`, or a dry run) are replayed: a
    dry-run scaler beside an acting one writes its own ticks, and interleaved they would
    read as twice as many. Every group is replayed (the budget was shared with them all,
    and with the groups gone since). A record from after `until` came from a clock ahead
    of this one (another host's) and would sit in the memory as a future.
    """
    skipped: dict[str, int] = {}
    kept: list[Recorded] = []
    total = 0
    for raw in raws:
        total += 1
        got = recorded(raw)
        flag = raw.get("acting", True) if isinstance(raw, dict) else None
        if isinstance(got, str):
            why = got
        elif not isinstance(flag, bool):
            why = "'acting' not a boolean"
        elif flag is not acting:
            why = "a dry run's" if acting else "an acting scaler's"
        elif got.at < since:
            why = "older than the replay"
        elif got.at > until:
            why = "written after now (a clock ahead of this one)"
        else:
            kept.append(got)
            continue
        skipped[why] = skipped.get(why, 0) + 1
    ticks = ticks_of(kept, interval_s=interval_s, idle_every_s=idle_every_s, until=until)
    problems: dict[str, int] = {}
    digest = config_digest(config)
    unique = {(r.at, r.group): r for r in kept}.values()  # one written twice counts once
    kept = [_checked(r, policy_name, digest, problems) for r in unique]
    forget_after_s = idle_every_s + 2 * interval_s
    first, start = _newest_checkpoint(kept, ticks)
    try:
        if start is not None and first == len(ticks):
            # The checkpoint is the last tick: nothing replayed after it would show that
            # the policy cannot go on from it, so it decides one tick more, thrown away.
            last = ticks[-1]
            policy(last.signals, start, config, last.at + interval_s)
        state = replay(
            ticks[first:],
            policy,
            config,
            forget_after_s=forget_after_s,
            start=start,
            start_at=ticks[first - 1].at if start is not None else -math.inf,
        )
    except (ArithmeticError, ValueError) as exc:
        if start is None:
            raise
        # Values this module reads but the policy cannot go on from: replay from nothing.
        why = f"a checkpoint the policy could not go on from ({type(exc).__name__})"
        problems[why] = problems.get(why, 0) + 1
        first, start = 0, None
        state = replay(ticks, policy, config, forget_after_s=forget_after_s)
    wanted = None if groups is None else set(groups)
    return Recall(
        state=ScalerState(
            groups=tuple(g for g in state.groups if wanted is None or g.group in wanted)
        ),
        ticks=len(ticks),
        read=total,
        skipped=skipped,
        dropped=tuple(
            sorted(g.group for g in state.groups if wanted is not None and g.group not in wanted)
        ),
        since=ticks[0].at if ticks else None,
        from_checkpoint=ticks[first - 1].at if start is not None else None,
        checkpoint_problems=problems,
    )


def _checked(record: Recorded, policy_name: str, digest: str, problems: dict[str, int]) -> Recorded:
    """`record` with a checkpoint this recall can start from, or without one (the reason
    counted in `problems`): another policy's memory, or one built under other settings,
    is not this policy's."""
    why = record.checkpoint_problem
    checkpoint = record.checkpoint
    if checkpoint is not None and (checkpoint.policy, checkpoint.config) != (policy_name, digest):
        why = "a checkpoint of another policy or configuration"
    if why is None:
        return record
    problems[why] = problems.get(why, 0) + 1
    return dataclasses.replace(record, checkpoint=None, checkpoint_problem=why)


def _newest_checkpoint(
    records: Sequence[Recorded], ticks: Sequence[PolicyTick]
) -> tuple[int, ScalerState | None]:
    """Where the replay starts: after the newest tick whose every group left a checkpoint
    naming the same groups (the index of the next tick, and the memory then); else at the
    first tick, with none. A tick some group's checkpoint is missing from (a record that
    could not be written, one of another version) is incomplete: an older one is used."""
    by_tick: dict[float, dict[str, Checkpoint]] = {}
    for r in records:
        if r.checkpoint is not None and r.exact:
            by_tick.setdefault(r.at, {})[r.group] = r.checkpoint
    index = {tick.at: i for i, tick in enumerate(ticks)}
    for at in sorted(by_tick, reverse=True):
        found, i = by_tick[at], index.get(at)
        if i is None or ticks[i].groups != set(found):
            continue
        if any(c.of_groups != set(found) for c in found.values()):
            continue
        # Every group of the tick has signals there (a checkpoint is only read beside them).
        order = [s.group for s in ticks[i].signals]
        return i + 1, ScalerState(groups=tuple(found[g].state for g in order))
    return 0, None


def to_resume(state: ScalerState) -> ScalerState:
    """The recalled memory without the predecessor's last signals of each group.

    The policy decides a group it remembers but did not collect on its last signals (stale:
    hold their count). Recalled, those can be as old as the replay's span: a group whose
    first collection in the new process failed would be set back to the count it had then.
    Until this process collects a group, it gets no decision, as before recall. The last
    ready count stays: the first collection compares with it, as the predecessor's would
    have, to tell a membership change (`last_change_at`).
    """
    return ScalerState(
        groups=tuple(dataclasses.replace(g, last_signals=None) for g in state.groups)
    )


def memory_s(config: PolicyConfig) -> float:
    """How far back the policy's memory reaches."""
    return max(config.burst_memory_s, config.headroom_memory_s, config.forecast_window_s)


REPLAY_WARM_UP_SHARE = 0.5
"""How much longer than the memory a restart replays, as a share of it."""


def replay_span_s(config: PolicyConfig) -> float:
    """How far back a restart reads and replays: the memory, and half as long again.

    A replay starts from no state, and its first decisions are made on no history; some of
    what they leave outlives the memory's windows (the scale-down window's recommendations,
    the learned spare, the regret factor). Started at the memory's edge, a replay after a
    30 s gap ended with another scale-down window than the scaler's own, and 0.8 points
    apart on `pareto` by the hour's end; started a quarter hour earlier, it gives the run
    of a scaler that had only paused on 10 of the 11 traces measured after a 30 s gap and
    on 11 of 11 after 60 s (`scripts/scaler_restart.py`; docs/benchmarks.md, stop 56). The
    simulator's short scenarios do not tell the two apart: only that benchmark does. A
    checkpoint among the records (`checkpoint.py`) makes the warm-up moot: the replay
    starts from it.
    """
    return (1 + REPLAY_WARM_UP_SHARE) * memory_s(config)

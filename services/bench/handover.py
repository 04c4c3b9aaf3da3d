"""Per-partition service through membership changes, from what a scale-step run recorded.

Pure. Inputs are plain values: every request as its partition saw it (`Served`: its offset,
when it landed on the tier topic, when the worker that answered it first polled it) and
the registry records of the group's workers (`OwnerRecord`: who owned which partitions
when). A partition is *stalled* while one of its records waits on the topic and none of its
records is read: the stretch from max(the partition's last read, the record's arrival) to
the record's read. A pause with no record waiting is not seen, and harms no one; with
records waiting it is measured to the millisecond (record timestamps and the worker's own
poll time). Membership changes are read from the registry: a member ready, draining, gone
or killed starts one, and the partitions whose owner changes after it are its moves.
"""

from __future__ import annotations

import bisect
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

MERGE_S = 1.0
"""Membership triggers closer than this are one change."""
SETTLE_S = 1.0
"""A change's window runs this long past its last move: a stall right after it counts."""
KILL_MARGIN_S = 2.0
"""A killed worker's partitions must be served again within its lease plus this."""


@dataclass(frozen=True, slots=True)
class Served:
    """One request on its partition; times in s from the schedule's start."""

    partition: int
    offset: int
    available_t: float
    """On the tier topic (the record's timestamp)."""
    polled_t: float | None
    """Read by the worker whose answer came first; None: never answered."""
    worker: str | None = None


@dataclass(frozen=True, slots=True)
class OwnerRecord:
    """One registry record of a worker of the group, as far as ownership goes."""

    t: float
    instance: str
    state: str
    owned: frozenset[int]
    standby: bool = False


@dataclass(frozen=True, slots=True)
class Stall:
    """Records of `partition` waited and none was read from `start_t` to `end_t`."""

    partition: int
    start_t: float
    end_t: float

    @property
    def duration_s(self) -> float:
        return self.end_t - self.start_t


@dataclass(frozen=True, slots=True)
class Move:
    """A partition changing owner within one change."""

    partition: int
    source: str | None
    target: str | None
    released_t: float | None
    acquired_t: float | None


@dataclass(frozen=True)
class Change:
    """One membership change: what started it and the partitions that moved after it."""

    start_t: float
    trigger: str
    """`join`, `leave`, `gone`, `kill`, `standby` or `promote`."""
    instance: str
    moves: tuple[Move, ...] = ()
    end_t: float = 0.0
    """The last move's release or acquisition (start_t when nothing moved)."""
    triggers: tuple[str, ...] = ()
    """Every trigger merged into it, `kind instance`, in order."""
    trigger_times: tuple[float, ...] = ()


@dataclass(frozen=True, slots=True)
class Kill:
    """The benchmark SIGKILLed `instance` at `t`."""

    t: float
    instance: str
    pid: int


# --- stalls ---------------------------------------------------------------------------


def stalls(served: Iterable[Served], end_t: float) -> dict[int, list[Stall]]:
    """Per partition, in time order, every stretch in which a record waited unread.

    Records are taken in offset order (a partition is read in order); the partition's
    last read is the latest poll so far. A record never answered waits until the next
    read of its partition, or `end_t` when none comes.
    """
    by_partition: dict[int, list[Served]] = defaultdict(list)
    for record in served:
        by_partition[record.partition].append(record)
    out: dict[int, list[Stall]] = {}
    for partition, records in sorted(by_partition.items()):
        records.sort(key=lambda r: r.offset)
        last_read = float("-inf")
        waiting: float | None = None
        """The earliest arrival of a record never answered since the last read."""
        found: list[Stall] = []
        for record in records:
            if record.polled_t is None:
                waiting = record.available_t if waiting is None else waiting
                continue
            arrived = record.available_t if waiting is None else min(waiting, record.available_t)
            start = max(last_read, arrived)
            if record.polled_t > start:
                found.append(Stall(partition, start, record.polled_t))
            last_read = max(last_read, record.polled_t)
            waiting = None
        if waiting is not None and end_t > max(last_read, waiting):
            found.append(Stall(partition, max(last_read, waiting), end_t))
        out[partition] = found
    return out


def longest_in(found: Sequence[Stall], start_t: float, end_t: float) -> Stall | None:
    """The longest stall overlapping [start_t, end_t] (counted whole, not clipped)."""
    overlapping = [s for s in found if s.end_t > start_t and s.start_t < end_t]
    return max(overlapping, key=lambda s: s.duration_s, default=None)


def longest_since(found: Sequence[Stall], start_t: float, end_t: float) -> float:
    """The longest wait after `start_t` of a stall overlapping [start_t, end_t]: a stall
    that began before `start_t` counts from `start_t` on (0.0 when none overlaps)."""
    overlapping = (s for s in found if s.end_t > start_t and s.start_t < end_t)
    return max((s.end_t - max(s.start_t, start_t) for s in overlapping), default=0.0)


# --- membership changes from the registry ---------------------------------------------


def _trigger(previous: OwnerRecord | None, record: OwnerRecord) -> str | None:
    """Whether this record changes the membership, and how."""
    was = previous.state if previous is not None else None
    if record.state == "ready" and was != "ready":
        return "standby" if record.standby else "join"
    if record.state == "draining" and was != "draining":
        return "leave"
    if record.state == "gone" and was not in ("gone", "draining"):
        return "gone"
    if previous is not None and record.state == "ready" and previous.standby != record.standby:
        return "standby" if record.standby else "promote"
    return None


def changes(
    records: Sequence[OwnerRecord],
    kills: Sequence[Kill] = (),
    *,
    merge_s: float = MERGE_S,
    tolerance_s: float = 0.05,
) -> list[Change]:
    """Membership changes in time order, each with the partitions that moved after it.

    Triggers less than `merge_s` apart are one change (a scale-up by several replicas, a
    kill and the views settling after it), named by its first trigger. Every ownership
    change (a record whose owned set differs from the instance's last one) belongs to the
    latest change started at or before it. A move pairs a release with the next
    acquisition of the same partition (a partition released at a kill's `gone` record, or
    never released because its owner died, pairs with its acquisition alone).
    """
    triggers: list[tuple[float, str, str]] = [(k.t, "kill", k.instance) for k in kills]
    events: list[tuple[float, str, frozenset[int], frozenset[int]]] = []
    last: dict[str, OwnerRecord] = {}
    for record in sorted(records, key=lambda r: r.t):
        previous = last.get(record.instance)
        how = _trigger(previous, record)
        if how is not None and not (
            how == "gone" and any(k.instance == record.instance for k in kills)
        ):
            triggers.append((record.t, how, record.instance))
        before = previous.owned if previous is not None else frozenset()
        if record.owned != before:
            events.append((record.t, record.instance, before - record.owned, record.owned - before))
        last[record.instance] = record
    triggers.sort()
    clusters: list[list[tuple[float, str, str]]] = []
    for trigger in triggers:
        if clusters and trigger[0] - clusters[-1][-1][0] <= merge_s:
            clusters[-1].append(trigger)
        else:
            clusters.append([trigger])
    if not clusters:
        return []
    times = [cluster[0][0] for cluster in clusters]
    grouped: dict[int, list[tuple[float, str, frozenset[int], frozenset[int]]]] = defaultdict(list)
    for event in events:
        index = bisect.bisect_right(times, event[0] + tolerance_s) - 1
        if index >= 0:
            grouped[index].append(event)
    out = []
    for index, cluster in enumerate(clusters):
        start_t, how, instance = cluster[0]
        change = Change(
            start_t,
            how,
            instance,
            triggers=tuple(f"{k} {i}" for _, k, i in cluster),
            trigger_times=tuple(t for t, _, _ in cluster),
        )
        moves = _moves(grouped.get(index, []), change)
        ends = [t for m in moves for t in (m.released_t, m.acquired_t) if t is not None]
        out.append(
            Change(
                start_t,
                how,
                instance,
                tuple(moves),
                max(ends, default=start_t),
                change.triggers,
                change.trigger_times,
            )
        )
    return out


def _moves(
    events: Sequence[tuple[float, str, frozenset[int], frozenset[int]]], change: Change
) -> list[Move]:
    released: dict[int, tuple[str, float]] = {}
    moves: list[Move] = []
    killed = [t.split(" ", 1)[1] for t in change.triggers if t.startswith("kill ")]
    for t, instance, gave, took in events:
        for partition in sorted(gave):
            released[partition] = (instance, t)
        for partition in sorted(took):
            source, at = released.pop(partition, (None, None))
            if source is None and len(killed) == 1:
                source = killed[0]
            moves.append(Move(partition, source, instance, at, t))
    moves.extend(Move(p, source, None, at, None) for p, (source, at) in sorted(released.items()))
    return sorted(moves, key=lambda m: m.partition)


def owner_at(records: Sequence[OwnerRecord], t: float) -> dict[int, str]:
    """Partition -> the instance whose latest record at or before `t` owns it."""
    latest: dict[str, OwnerRecord] = {}
    for record in records:
        if record.t <= t:
            latest[record.instance] = record
    return {p: i for i, r in sorted(latest.items()) if r.state != "gone" for p in r.owned}


# --- what each change cost --------------------------------------------------------------


def _reads(served: Iterable[Served]) -> dict[tuple[int, str], list[float]]:
    """(partition, worker) -> sorted poll times."""
    out: dict[tuple[int, str], list[float]] = defaultdict(list)
    for record in served:
        if record.polled_t is not None and record.worker is not None:
            out[(record.partition, record.worker)].append(record.polled_t)
    for times in out.values():
        times.sort()
    return out


def _first_after(times: Sequence[float], t: float) -> float | None:
    index = bisect.bisect_left(times, t)
    return times[index] if index < len(times) else None


def _last_before(times: Sequence[float], t: float) -> float | None:
    index = bisect.bisect_right(times, t)
    return times[index - 1] if index > 0 else None


def _r(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


@dataclass(frozen=True)
class ChangeGaps:
    """One change: the longest stall of every partition that stayed and every one that moved."""

    start_t: float
    end_t: float
    trigger: str
    instance: str
    still: dict[int, float]
    """Partitions owned by one member all through the window -> longest stall, s."""
    moved: list[dict[str, Any]] = field(default_factory=list)
    triggers: tuple[str, ...] = ()
    still_since_change: dict[int, float] = field(default_factory=dict)
    """The same partitions -> longest wait counted from the change's start: the part of a
    stall that began before the change (an overloaded owner) is left out."""

    def longest_still(self, *, since_change: bool = False) -> tuple[int | None, float]:
        gaps = self.still_since_change if since_change else self.still
        if not gaps:
            return None, 0.0
        partition = max(gaps, key=lambda p: gaps[p])
        return partition, gaps[partition]

    def longest_moved(self, *, since_change: bool = False) -> float | None:
        key = "gap_since_change_s" if since_change else "longest_gap_s"
        gaps = [m[key] for m in self.moved if m[key] is not None]
        return max(gaps, default=None)

    def to_dict(self) -> dict[str, Any]:
        partition, gap = self.longest_still()
        return {
            "start_t": _r(self.start_t),
            "end_t": _r(self.end_t),
            "trigger": self.trigger,
            "instance": self.instance,
            "triggers": list(self.triggers),
            "moved_count": len(self.moved),
            "still_count": len(self.still),
            "longest_still_gap_s": _r(gap),
            "longest_still_partition": partition,
            "longest_moved_gap_s": _r(self.longest_moved()),
            "longest_still_gap_since_change_s": _r(self.longest_still(since_change=True)[1]),
            "longest_moved_gap_since_change_s": _r(self.longest_moved(since_change=True)),
            "still": {str(p): _r(g) for p, g in sorted(self.still.items())},
            "moved": self.moved,
        }


def change_gaps(
    change: Change,
    records: Sequence[OwnerRecord],
    found: Mapping[int, Sequence[Stall]],
    reads: Mapping[tuple[int, str], Sequence[float]],
    *,
    partitions: int,
    settle_s: float = SETTLE_S,
) -> ChangeGaps:
    """The longest stall per partition in [start, end + settle], split into stayed/moved.

    A moved partition also says when it was released and acquired (registry), when the
    old owner last read it and the new owner first read it, relative to the change's start.
    Each gap is given twice: the whole stall, and the wait from the change's start on (a
    stall an overloaded owner began before the change is not the handover's doing).
    """
    w0, w1 = change.start_t, change.end_t + settle_s
    moved_parts = {m.partition for m in change.moves}
    before, after = owner_at(records, w0), owner_at(records, w1)
    still: dict[int, float] = {}
    still_since: dict[int, float] = {}
    for partition in range(partitions):
        if partition in moved_parts:
            continue
        owner = before.get(partition)
        if (
            owner is None
            or after.get(partition) != owner
            or _owner_changed(records, partition, w0, w1)
        ):
            continue
        stall = longest_in(found.get(partition, ()), w0, w1)
        still[partition] = stall.duration_s if stall else 0.0
        still_since[partition] = longest_since(found.get(partition, ()), w0, w1)
    moved = []
    for move in change.moves:
        stall = longest_in(found.get(move.partition, ()), w0, w1)
        old = reads.get((move.partition, move.source), ()) if move.source else ()
        new = reads.get((move.partition, move.target), ()) if move.target else ()
        # Reads around this move only: a partition may move again soon after.
        pivot = move.acquired_t if move.acquired_t is not None else w1
        last_old = _last_before(old, pivot)
        first_new = _first_after(new, pivot)
        moved.append(
            {
                "partition": move.partition,
                "from": move.source,
                "to": move.target,
                "released_s": _r(None if move.released_t is None else move.released_t - w0),
                "acquired_s": _r(None if move.acquired_t is None else move.acquired_t - w0),
                "acquired_after_trigger_s": _r(_after_trigger(change, move.acquired_t)),
                "last_read_by_old_s": _r(None if last_old is None else last_old - w0),
                "first_read_by_new_s": _r(None if first_new is None else first_new - w0),
                "handover_s": _r(
                    None if first_new is None or last_old is None else first_new - last_old
                ),
                "longest_gap_s": _r(stall.duration_s) if stall else 0.0,
                # From its release when that came first (a change's moves are gathered
                # from up to `tolerance_s` before its first trigger).
                "gap_since_change_s": _r(
                    longest_since(
                        found.get(move.partition, ()),
                        min(w0, move.released_t if move.released_t is not None else w0),
                        w1,
                    )
                ),
            }
        )
    return ChangeGaps(
        start_t=w0,
        end_t=w1,
        trigger=change.trigger,
        instance=change.instance,
        still=still,
        moved=moved,
        triggers=change.triggers,
        still_since_change=still_since,
    )


def _after_trigger(change: Change, t: float | None) -> float | None:
    """Seconds from the latest of the change's triggers at or before `t` to `t`."""
    if t is None:
        return None
    before = [x for x in change.trigger_times or (change.start_t,) if x <= t]
    return t - max(before) if before else None


def _owner_changed(records: Sequence[OwnerRecord], partition: int, w0: float, w1: float) -> bool:
    """Whether any record inside the window moves `partition` (gained or lost by anyone)."""
    last: dict[str, frozenset[int]] = {}
    for record in sorted(records, key=lambda r: r.t):
        had = partition in last.get(record.instance, frozenset())
        has = partition in record.owned and record.state != "gone"
        if w0 <= record.t <= w1 and had != has:
            return True
        last[record.instance] = record.owned if record.state != "gone" else frozenset()
    return False


def kill_gaps(
    kill: Kill,
    records: Sequence[OwnerRecord],
    found: Mapping[int, Sequence[Stall]],
    reads: Mapping[tuple[int, str], Sequence[float]],
    *,
    lease_s: float,
    margin_s: float = KILL_MARGIN_S,
) -> dict[str, Any]:
    """When the killed worker's partitions were read again, against its lease + margin.

    Per partition: the registry's acquisition by another member and the first read by a
    member other than the victim after the kill, both from the kill; the stall across it.
    """
    owned = sorted(p for p, i in owner_at(records, kill.t).items() if i == kill.instance)
    gone = next(
        (
            r.t
            for r in records
            if r.instance == kill.instance and r.state == "gone" and r.t >= kill.t
        ),
        None,
    )
    bound = lease_s + margin_s
    per: list[dict[str, Any]] = []
    for partition in owned:
        acquired = next(
            (
                r
                for r in sorted(records, key=lambda r: r.t)
                if r.t >= kill.t and r.instance != kill.instance and partition in r.owned
            ),
            None,
        )
        first = min(
            (
                t
                for (p, worker), times in reads.items()
                if p == partition and worker != kill.instance
                for t in [_first_after(times, kill.t)]
                if t is not None
            ),
            default=None,
        )
        stall = longest_in(found.get(partition, ()), kill.t, first if first is not None else kill.t)
        served = None if first is None else first - kill.t
        per.append(
            {
                "partition": partition,
                "acquired_by": acquired.instance if acquired else None,
                "acquired_s": _r(acquired.t - kill.t) if acquired else None,
                "served_again_s": _r(served),
                "longest_gap_s": _r(stall.duration_s) if stall else 0.0,
                "within_bound": served is not None and served <= bound,
            }
        )
    served_again = [p["served_again_s"] for p in per]
    worst = None if not per or None in served_again else max(served_again)
    return {
        "t": _r(kill.t),
        "instance": kill.instance,
        "pid": kill.pid,
        "partitions": owned,
        "gone_announced_s": _r(None if gone is None else gone - kill.t),
        "lease_s": lease_s,
        "bound_s": bound,
        "served_again_s": worst,
        "within_bound": bool(per) and all(p["within_bound"] for p in per),
        "per_partition": per,
    }


# --- answers ----------------------------------------------------------------------------


def duplicates(answers: Mapping[str, Sequence[str]], sent: Iterable[str]) -> dict[str, Any]:
    """Lost and repeated answers over the sent requests.

    `answers`: request id -> the status of every result record received, in order. A client
    keeps the first per id; a repeat with the same status is dropped as a repeat (what
    at-least-once delivery allows), one with another status is a second, different answer.
    """
    ids = list(sent)
    lost = sum(1 for i in ids if not answers.get(i))
    repeated = [i for i in ids if len(answers.get(i, ())) > 1]
    conflicting = [i for i in repeated if len(set(answers[i])) > 1]
    return {
        "sent": len(ids),
        "lost": lost,
        "answered_more_than_once": len(repeated),
        "repeat_records": sum(len(answers[i]) - 1 for i in repeated),
        "answered_twice_after_dedupe": len(conflicting),
        "conflicting_examples": conflicting[:5],
    }


# --- the whole picture ------------------------------------------------------------------


def handover_report(
    served: Sequence[Served],
    records: Sequence[OwnerRecord],
    *,
    partitions: int,
    end_t: float,
    kills: Sequence[Kill] = (),
    lease_s: float = 6.0,
    phases: Sequence[tuple[str, float, float]] = (),
    from_t: float = float("-inf"),
    stalled: Mapping[int, list[Stall]] | None = None,
) -> dict[str, Any]:
    """Every change from `from_t` on: its gaps, the stayed/moved worst cases, the kills,
    and each partition's longest stall per phase. `stalled`: `stalls(served, end_t)`, when
    the caller has it already."""
    found = stalled if stalled is not None else stalls(served, end_t)
    reads = _reads(served)
    found_changes = [
        c
        for c in changes(records, kills)
        if c.start_t >= from_t and (c.moves or c.trigger == "kill")
    ]
    gaps = [change_gaps(c, records, found, reads, partitions=partitions) for c in found_changes]
    worst_still = _worst_still(gaps, since_change=False)
    worst_since = _worst_still(gaps, since_change=True)
    moved = [m for g in gaps for m in g.moved]
    moved_gaps = [m["longest_gap_s"] for m in moved if m["longest_gap_s"] is not None]
    moved_since = [m["gap_since_change_s"] for m in moved if m["gap_since_change_s"] is not None]
    handovers = [m["handover_s"] for m in moved if m["handover_s"] is not None]
    acquired = [
        m["acquired_after_trigger_s"] for m in moved if m["acquired_after_trigger_s"] is not None
    ]
    return {
        "method": (
            "per record: tier-topic timestamp and the answering worker's poll time "
            "(record timestamp + queue_ms); a partition stalls while a record waits and "
            "none of its records is read"
        ),
        "changes": [g.to_dict() for g in gaps],
        "still": {
            "longest_gap_s": _r(worst_still[0][1]) if worst_still else None,
            "partition": worst_still[0][0] if worst_still else None,
            "at_change_t": _r(worst_still[1].start_t) if worst_still else None,
            "trigger": worst_still[1].trigger if worst_still else None,
            "longest_gap_since_change_s": _r(worst_since[0][1]) if worst_since else None,
            "since_change_partition": worst_since[0][0] if worst_since else None,
            "since_change_at_t": _r(worst_since[1].start_t) if worst_since else None,
        },
        "moved": {
            "count": len(moved),
            "longest_gap_s": _r(max(moved_gaps, default=None)),
            "longest_gap_since_change_s": _r(max(moved_since, default=None)),
            "median_gap_s": _r(statistics.median(moved_gaps)) if moved_gaps else None,
            "median_handover_s": _r(statistics.median(handovers)) if handovers else None,
            "median_acquired_s": _r(statistics.median(acquired)) if acquired else None,
            "max_acquired_s": _r(max(acquired, default=None)),
            "never_acquired": sum(1 for m in moved if m["to"] is None),
        },
        "outside_changes": _longest_outside(found, gaps, from_t),
        "kills": [kill_gaps(k, records, found, reads, lease_s=lease_s) for k in kills],
        "per_partition": per_partition(found, partitions, phases),
    }


def _worst_still(
    gaps: Sequence[ChangeGaps], *, since_change: bool
) -> tuple[tuple[int | None, float], ChangeGaps] | None:
    """The change whose stayed partitions had the longest gap: ((partition, gap), change)."""
    found = [(g.longest_still(since_change=since_change), g) for g in gaps if g.still]
    return max(found, key=lambda x: x[0][1], default=None)


def _longest_outside(
    found: Mapping[int, Sequence[Stall]], gaps: Sequence[ChangeGaps], from_t: float
) -> dict[str, Any]:
    """The longest stall from `from_t` on that overlaps no change's window: what a
    partition goes through with nobody joining or leaving (the background to compare with)."""
    windows = [(g.start_t, g.end_t) for g in gaps]
    outside = [
        x
        for found_p in found.values()
        for x in found_p
        if x.end_t > from_t and not any(x.end_t > lo and x.start_t < hi for lo, hi in windows)
    ]
    worst = max(outside, key=lambda x: x.duration_s, default=None)
    return {
        "longest_gap_s": _r(worst.duration_s) if worst else None,
        "partition": worst.partition if worst else None,
        "at_t": _r(worst.start_t) if worst else None,
    }


def per_partition(
    found: Mapping[int, Sequence[Stall]],
    partitions: int,
    phases: Sequence[tuple[str, float, float]],
) -> dict[str, dict[str, float]]:
    """Phase -> partition -> its longest stall (s) in that phase."""
    out: dict[str, dict[str, float]] = {}
    for name, start, end in phases:
        row = {}
        for partition in range(partitions):
            stall = longest_in(found.get(partition, ()), start, end)
            row[str(partition)] = _r(stall.duration_s) if stall else 0.0
        out[name] = row  # type: ignore[assignment]
    return out

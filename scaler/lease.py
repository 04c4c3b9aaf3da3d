"""Which scaler acts: a lease whose holder the order of one log decides.

Several `inferbus scaler run` may run against one installation: a standby kept for a fast
takeover, a second one started by mistake, a rollout that overlaps the old pod. Two acting
scalers fight (each sets the replica counts it decided, and each writes the records the
workers read their `desired` from), so only the holder of the lease acts; the others wait.

The lease is a log of records on `inferbus.scaler.lease` (one partition), each a claim of a
term, a renewal of one or a release. Every scaler folds the same records in the same order
(`fold`), so they agree on the holder without a clock in common:

- the first claim of term n + 1 in the log takes the lease; a claim that lost the race,
  one of a term already taken, and renewals of an older term change nothing;
- the holder renews every `RENEW_SHARE` of the lease; a reader that heard no renewal for
  the whole lease (by its own clock, from when it read the last one) may claim the next
  term (`claimable`);
- the holder stops acting once the newest renewal it read back from the log was sent
  `FENCE_SHARE` of the lease ago (`fenced`): a reader claims no sooner than the whole
  lease after it read that renewal, and only after reading the log to the end it asked
  the broker for, so while the holder's renewals are written and read in time no other
  claims; a holder cut off from the broker (or whose reads stall) stops while it cannot
  renew, and one that reads a newer term's claim stops at once;
- a release (a clean stop) frees the lease at once.

The margins assume a process is not paused for longer than the fence leaves (a holder
frozen between its last check and an action) and that monotonic clocks run at the same
rate; the early claim below also trusts wall clocks to within `CLOCK_SKEW_S`.

A reader that starts reads the log's last records; what it finds there it did not hear
live, so it waits one renewal's time, and claims early only where the holder's own clock
(with `CLOCK_SKEW_S` to spare) says its last renewal is older than the lease. Only a
claim's winner renews, so a renewal of a newer term than a reader knows (one that started
mid-log, a log the broker began again) names the holder; a claim read before the reader
knows the term it follows, which may have lost its race, names none, but where the reader
reads the log from its first record: a broker that came back without its logs begins
it with whatever term the first claim after it names.

Pure: records in, a view out; `lease_keeper.py` reads and writes the log.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, Literal

from scaler.signals import is_finite, is_json_number

LeaseKind = Literal["claim", "renew", "release"]
KINDS: tuple[LeaseKind, ...] = ("claim", "renew", "release")

LEASE_SCHEMA_VERSION = 1

RENEW_SHARE = 1 / 4
"""The holder renews every this share of the lease: with `FENCE_SHARE`, one renewal may be
lost (or read back late) without the holder stopping, if the next is read back within
0.2 of the lease; a standby waits out three lost renewals."""

FENCE_SHARE = 0.7
"""The holder stops acting once its newest renewal read back was sent this share of the
lease ago: before a reader, which counts the whole lease from when it read it, may claim
(a lease of 10 s leaves 3 s for the reader's fetch and a slow clock)."""

CLOCK_SKEW_S = 5.0
"""How far apart two hosts' clocks may be for a starting reader to trust the holder's own
time on its last record (`claimable`)."""


@dataclass(frozen=True)
class LeaseRecord:
    """One record of the lease log."""

    kind: LeaseKind
    holder: str
    """The instance that claims, renews or releases (unique per process)."""
    term: int
    lease_s: float
    written_at: float
    """The writer's wall clock (s), for a reader that did not hear the record live."""


@dataclass(frozen=True)
class LeaseView:
    """The lease as the log read so far says it is."""

    holder: str | None = None
    term: int = 0
    """The newest term taken (a released lease keeps it: the next claim is term + 1)."""
    lease_s: float = 0.0
    heard_at: float | None = None
    """The reader's monotonic clock when it read the holder's newest claim or renewal
    live; None where it read it from the log's past (`written_at` tells its age)."""
    written_at: float | None = None
    from_start: bool = False
    """The reader reads the log from its first record (a new log, or one the broker began
    again): there the first claim, whatever its term, is the first to be made."""


def fold(view: LeaseView, record: LeaseRecord, *, heard_at: float | None) -> LeaseView:
    """`view` after `record`, read at `heard_at` (None: read from the log's past)."""
    taken = LeaseView(record.holder, record.term, record.lease_s, heard_at, record.written_at)
    if record.kind == "claim":
        first = view.from_start and view.term == 0
        return taken if first or record.term == view.term + 1 else view
    if record.kind == "renew":
        # Only a claim's winner renews: a renewal of a newer term than this reader knows
        # (it started mid-log, or the broker began the log again) names the holder.
        same = record.holder == view.holder and record.term == view.term
        return taken if same or record.term > view.term else view
    if record.holder == view.holder and record.term == view.term:
        return LeaseView(term=view.term)
    return view


def reading_from(offset: int) -> LeaseView:
    """The view of a reader that starts at `offset` of the log, before any record."""
    return LeaseView(from_start=offset == 0)


def claimable(
    view: LeaseView, *, now: float, wall_now: float, caught_up_at: float, lease_s: float
) -> bool:
    """Whether a reader may claim the next term at `now` (its monotonic clock; `wall_now`
    its wall clock), having read the log's past by `caught_up_at`; `lease_s` is its own
    lease, for a log that names none yet."""
    waited = now - caught_up_at
    if view.holder is None:
        # Released: at once. A log that never named a holder (a new one, or one a broker
        # began again before the holder's next renewal): one renewal's time first.
        return view.term > 0 or waited >= _renewal_wait_s(lease_s)
    if view.heard_at is not None:
        return now - view.heard_at >= view.lease_s
    if waited >= view.lease_s:
        return True
    # Heard only in the log's past. A live holder renews within one renewal's time, and
    # then it is heard; with no renewal by then, the holder's own clock may tell its age.
    old = view.written_at is not None and wall_now - view.written_at >= view.lease_s + (
        CLOCK_SKEW_S
    )
    return old and waited >= _renewal_wait_s(view.lease_s)


def _renewal_wait_s(lease_s: float) -> float:
    """Long enough for a live holder's next renewal to be written and read."""
    return lease_s * RENEW_SHARE + 1.0


def began_again(view: LeaseView, *, now: float) -> LeaseView:
    """The view of a reader whose log the broker began again (it lost its logs) at `now`:
    the holder it knew is kept, heard now, so that none claims before a whole lease with
    no renewal on the new log; the new log's first records fold on top."""
    heard_at = now if view.holder is not None else view.heard_at
    return dataclasses.replace(view, heard_at=heard_at, from_start=True)


def fenced(acked_sent_at: float | None, *, now: float, lease_s: float) -> bool:
    """Whether the holder must stop acting: its newest claim or renewal that it read back
    from the log, still naming it, was sent at `acked_sent_at` (its monotonic clock), too
    long ago. Read back, not only acknowledged: a holder whose reads stall would not see
    a newer term's claim."""
    return acked_sent_at is None or now - acked_sent_at >= FENCE_SHARE * lease_s


def record_to_json(record: LeaseRecord) -> bytes:
    """The record's value on the lease log."""
    return json.dumps(
        {
            "schema_version": LEASE_SCHEMA_VERSION,
            "kind": record.kind,
            "holder": record.holder,
            "term": record.term,
            "lease_s": record.lease_s,
            "written_at": record.written_at,
        },
        separators=(",", ":"),
    ).encode()


_FIELDS = frozenset({"schema_version", "kind", "holder", "term", "lease_s", "written_at"})


def record_from_json(value: bytes | None) -> LeaseRecord | str:
    """The record in a lease log value, or why it is not one (it is then left out)."""
    try:
        raw: Any = json.loads(value) if value is not None else None
    except (ValueError, RecursionError):  # UnicodeDecodeError included; nested past the stack
        return "not JSON"
    if not isinstance(raw, dict) or set(raw) != _FIELDS:
        return "not a lease record of this version"
    if raw["schema_version"] != LEASE_SCHEMA_VERSION:
        return "not a lease record of this version"
    kind, holder, term = raw["kind"], raw["holder"], raw["term"]
    if kind not in KINDS:
        return f"an unknown kind {kind!r}"
    if not isinstance(holder, str) or not holder:
        return "no holder"
    if not isinstance(term, int) or isinstance(term, bool) or term < 1:
        return "a term that is not a count from 1"
    numbers = (raw["lease_s"], raw["written_at"])
    if not all(is_json_number(n) and is_finite(n) for n in numbers) or raw["lease_s"] <= 0:
        return "a lease or a time that is not a finite number (a lease above 0)"
    return LeaseRecord(kind, holder, term, float(raw["lease_s"]), float(raw["written_at"]))

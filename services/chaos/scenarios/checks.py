"""Checks several scenarios make, worded alike in every report."""

from __future__ import annotations

from collections.abc import Mapping, Set

from services.chaos.ledger import Tally
from services.chaos.report import Check
from services.chaos.traffic import TIMED_OUT


def none_lost(total: Tally, *, note: str | None = None) -> Check:
    """No accepted event lost; `note` follows the numbers in brackets."""
    detail = f"{total.lost} of {total.accepted} accepted lost"
    return Check("0 lost", total.lost == 0, detail if note is None else f"{detail} ({note})")


SHADOWED_RESULT = (
    "the client read these results, and the observer, reading the results topic by offset "
    "after the restart, did not: Tansu numbers a re-created topic's records from lower "
    "offsets, so an offset can hold two records and a reader by offset sees one "
    "(docs/reliability.md)"
)


def answered_to_client(lost: Set[str], seen: Mapping[str, str]) -> Check:
    """The observer's losses that the client read a result for (the broker's shadowed
    offsets, not a request left unanswered): reported, not asserted."""
    read = sorted(i for i in lost if seen.get(i) not in (None, TIMED_OUT))
    return Check(
        "the observer reads every result the client read",
        not read,
        f"{len(read)} result(s) the client read and the observer did not",
        broker_defect=SHADOWED_RESULT,
    )


def late_for_client(lost: Set[str], seen: Mapping[str, str]) -> Check:
    """Requests the stack answered (the observer read a result) while the client's `infer`
    had timed out: not lost, late for the caller. Whether an outage's backlog is served
    within a client's timeout is the host's speed: reported, not asserted."""
    late = sorted(i for i, end in seen.items() if end == TIMED_OUT and i not in lost)
    return Check(
        "the client waited long enough for every answer",
        not late,
        f"{len(late)} answered after the client's infer timed out"
        + (f" ({', '.join(late[:5])})" if late else ""),
        host_speed=True,
    )


def client_lost(lost: Set[str], seen: Mapping[str, str]) -> set[str]:
    """Of the requests the observer counts lost, those the client got no result for."""
    return {i for i in lost if seen.get(i) in (None, TIMED_OUT)}


def first_ok_after(event: str, recover_s: float | None) -> str:
    """When the first request sent after `event` was served ok, for a check's detail."""
    after = "never" if recover_s is None else f"{recover_s:.1f}s after it"
    return f"first ok for a request sent after the {event}: {after}"


def client_view(lost: Set[str], seen: Mapping[str, str]) -> str:
    """What the client's own `infer` calls ended with for the requests the ledger counts
    lost: a result there means the observer's read of the results topic missed one the
    client read (the broker's shadowed offsets); a timeout, that no copy was answered."""
    got = sorted(seen[i] for i in lost if i in seen and seen[i] != TIMED_OUT)
    timed_out = sum(1 for i in lost if seen.get(i) == TIMED_OUT)
    unknown = len(lost) - len(got) - timed_out
    parts = [f"the client got a result for {len(got)}" + (f" ({', '.join(got)})" if got else "")]
    parts.append(f"timed out on {timed_out}")
    if unknown:
        parts.append(f"has no word on {unknown}")
    return "of those, " + ", ".join(parts)

"""Accounting (pure): each sent event's fate from the results and DLQ records seen."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

Channel = Literal["result", "dlq"]
LOST = "lost"
NOT_ACCEPTED = "not_accepted"
DLQ = "dlq"


@dataclass(frozen=True, slots=True)
class Sent:
    """One event the harness produced."""

    kind: str
    """What the event is: `valid`, `poison`, `random-bytes`, ..."""
    request_id: str | None
    """The id a result for it would carry; None when it has no usable one."""
    digest: str
    """Digest of its bytes: a DLQ record carries the original bytes."""
    sent_s: float
    """Wall clock when it was produced, epoch seconds."""
    deadline_s: float
    """By when it must have an outcome (before the grace), epoch seconds."""
    accepted: bool
    """The broker acked it (an unacked event is the producer's to retry, never lost)."""
    tier: str | None = None
    phase: str = "main"
    """The scenario's phase when it was sent (`before`, `down`, `after`, ...)."""


@dataclass(frozen=True, slots=True)
class Seen:
    """A result or DLQ record the harness read."""

    channel: Channel
    ref: str
    """The result's request id, or the digest of the DLQ record's value."""
    status: str
    """The result's status, or the DLQ record's `inferbus-error` code."""
    at_s: float
    """Wall clock when it was read, epoch seconds."""
    worker_id: str | None = None


@dataclass(frozen=True, slots=True)
class Fate:
    """What became of one sent event."""

    sent: Sent
    first: Seen | None
    """Its first outcome, whenever it came."""
    repeats: int = 0
    """Further outcomes that agree with the first (at-least-once repeats)."""
    conflicts: int = 0
    """Further outcomes that disagree with the first (another status, or result and DLQ)."""
    grace_s: float = 0.0

    @property
    def late(self) -> bool:
        """An outcome came, but after the deadline plus the grace."""
        return self.first is not None and self.first.at_s > self.sent.deadline_s + self.grace_s

    @property
    def outcome(self) -> str:
        """`ok`, an error status, `dlq`, `lost` or `not_accepted`."""
        if self.first is None or self.late:
            return LOST if self.sent.accepted else NOT_ACCEPTED
        return DLQ if self.first.channel == "dlq" else self.first.status

    @property
    def latency_s(self) -> float | None:
        """Seconds from send to the first outcome, when there is one in time."""
        if self.first is None or self.late:
            return None
        return self.first.at_s - self.sent.sent_s


def _unique(values: Iterable[str], what: str) -> None:
    counts = Counter(values)
    repeated = [value for value, n in counts.items() if n > 1]
    if repeated:
        raise ValueError(f"{len(repeated)} {what} repeat among sent events, e.g. {repeated[0]!r}")


def fates(sent: Sequence[Sent], seen: Iterable[Seen], *, grace_s: float) -> list[Fate]:
    """Match every sent event with the results (by request id) and DLQ records (by digest).

    Raises ValueError when two sent events share a request id or a digest: their outcomes
    could not be told apart.
    """
    _unique((s.request_id for s in sent if s.request_id is not None), "request ids")
    _unique((s.digest for s in sent), "digests")
    by_ref: dict[tuple[Channel, str], list[Seen]] = defaultdict(list)
    for item in seen:
        by_ref[(item.channel, item.ref)].append(item)
    out: list[Fate] = []
    for event in sent:
        outcomes = list(by_ref.get(("dlq", event.digest), ()))
        if event.request_id is not None:
            outcomes.extend(by_ref.get(("result", event.request_id), ()))
        if not outcomes:
            out.append(Fate(event, None, grace_s=grace_s))
            continue
        outcomes.sort(key=lambda s: s.at_s)
        first, rest = outcomes[0], outcomes[1:]
        agree = sum(1 for s in rest if (s.channel, s.status) == (first.channel, first.status))
        out.append(Fate(event, first, agree, len(rest) - agree, grace_s))
    return out


@dataclass(frozen=True)
class Tally:
    """Counts over a set of fates: what a scenario prints per phase."""

    sent: int = 0
    not_accepted: int = 0
    ok: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    """Error results by status."""
    dlq: int = 0
    duplicates: int = 0
    conflicts: int = 0
    lost: int = 0
    late: int = 0
    """Of the lost, those whose outcome came after the deadline plus the grace."""

    @property
    def accepted(self) -> int:
        return self.sent - self.not_accepted

    @property
    def answered(self) -> int:
        """Events with an outcome in time: ok, a named error, or a DLQ record."""
        return self.ok + sum(self.errors.values()) + self.dlq

    def to_json(self) -> dict[str, Any]:
        return {
            "sent": self.sent,
            "accepted": self.accepted,
            "not_accepted": self.not_accepted,
            "ok": self.ok,
            "errors": dict(sorted(self.errors.items())),
            "dlq": self.dlq,
            "duplicates": self.duplicates,
            "conflicts": self.conflicts,
            "lost": self.lost,
            "late": self.late,
        }


def tally(items: Iterable[Fate]) -> Tally:
    """Count outcomes, repeats and conflicts."""
    counts: Counter[str] = Counter()
    sent = duplicates = conflicts = late = 0
    for fate in items:
        sent += 1
        counts[fate.outcome] += 1
        duplicates += fate.repeats
        conflicts += fate.conflicts
        late += fate.late
    errors = {
        status: n for status, n in counts.items() if status not in ("ok", DLQ, LOST, NOT_ACCEPTED)
    }
    return Tally(
        sent=sent,
        not_accepted=counts[NOT_ACCEPTED],
        ok=counts["ok"],
        errors=errors,
        dlq=counts[DLQ],
        duplicates=duplicates,
        conflicts=conflicts,
        lost=counts[LOST],
        late=late,
    )


def tally_by(items: Iterable[Fate], key: Callable[[Fate], str]) -> dict[str, Tally]:
    """A tally per group of fates (per phase, per tier, per kind), groups sorted by name."""
    groups: dict[str, list[Fate]] = defaultdict(list)
    for fate in items:
        groups[key(fate)].append(fate)
    return {name: tally(groups[name]) for name in sorted(groups)}


def outcomes_by(items: Iterable[Fate], key: Callable[[Fate], str]) -> dict[str, dict[str, int]]:
    """Outcome counts per group: what each kind of event came to."""
    groups: dict[str, Counter[str]] = defaultdict(Counter)
    for fate in items:
        groups[key(fate)][fate.outcome] += 1
    return {name: dict(sorted(groups[name].items())) for name in sorted(groups)}

"""Measures over fates and outcomes (pure): latency percentiles, time to recover, stalls."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Sequence

from services.chaos.ledger import LOST, Fate, Seen


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (`q` in 0-100); None for no values. `inf` values sort last."""
    if not values:
        return None
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be within 0-100, got {q}")
    ordered = sorted(values)
    rank = max(math.ceil(q / 100 * len(ordered)), 1)
    return ordered[rank - 1]


def latencies_ms(items: Iterable[Fate]) -> list[float]:
    """Send-to-outcome ms of each fate; anything but an `ok` in time counts as `inf`.

    An expired or rejected request did not meet its latency objective, so its latency is
    not left out (that would make a flood that expires most requests look fast).
    """
    out: list[float] = []
    for fate in items:
        latency = fate.latency_s
        out.append(latency * 1000 if latency is not None and fate.outcome == "ok" else math.inf)
    return out


def first_ok(
    seen: Iterable[Seen],
    after_s: float,
    *,
    where: Callable[[Seen], bool] = lambda _: True,
) -> Seen | None:
    """The first `ok` result read at or after `after_s` that `where` accepts."""
    found = [
        s
        for s in seen
        if s.channel == "result" and s.status == "ok" and s.at_s >= after_s and where(s)
    ]
    return min(found, key=lambda s: s.at_s) if found else None


def first_ok_after(
    seen: Iterable[Seen],
    after_s: float,
    *,
    where: Callable[[Seen], bool] = lambda _: True,
) -> float | None:
    """Seconds from `after_s` to the first `ok` result read after it that `where` accepts."""
    found = first_ok(seen, after_s, where=where)
    return found.at_s - after_s if found is not None else None


def first_ok_sent_after(items: Iterable[Fate], sent_after_s: float) -> float | None:
    """Seconds from `sent_after_s` to the first `ok` of an event sent after it.

    Such an event went through whatever instance holds its partition now: its outcome
    shows the path works again.
    """
    times = [
        f.first.at_s
        for f in items
        if f.first is not None and f.sent.sent_s >= sent_after_s and f.outcome == "ok"
    ]
    return min(times) - sent_after_s if times else None


def last_loss_sent_after(items: Iterable[Fate], sent_after_s: float) -> float | None:
    """Seconds from `sent_after_s` to the send of the latest lost event sent after it.

    None when nothing sent after `sent_after_s` was lost.
    """
    times = [f.sent.sent_s for f in items if f.sent.sent_s >= sent_after_s and f.outcome == LOST]
    return max(times) - sent_after_s if times else None


def max_gap_s(seen: Iterable[Seen], start_s: float, end_s: float) -> float:
    """The longest stretch within [start_s, end_s] without an `ok` result."""
    times = sorted(
        s.at_s
        for s in seen
        if s.channel == "result" and s.status == "ok" and start_s <= s.at_s <= end_s
    )
    edges = [start_s, *times, end_s]
    return max(b - a for a, b in itertools.pairwise(edges))


def lateness_s(items: Iterable[Fate]) -> list[float]:
    """For each event answered only after its deadline plus the grace: how long after the
    deadline its outcome came (such an event counts as lost)."""
    return [f.first.at_s - f.sent.deadline_s for f in items if f.late and f.first is not None]

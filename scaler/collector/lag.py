"""Pure lag arithmetic: one partition's lag from its offsets, each edge case a named branch."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

LagBranch = Literal["ok", "no_commit_yet", "expired_commit", "partition_missing", "stuck"]
"""How a partition's lag was worked out (KEDA-style: every edge case has a name)."""

EndBranch = Literal["reported", "batch_base_end"]
"""`batch_base_end`: the broker reported a batch's base offset + 1 (Tansu 0.6); corrected."""


@dataclass(frozen=True)
class PartitionOffsets:
    """One partition's answer from the broker; `answered=False` when it was absent."""

    partition: int
    end: int | None
    beginning: int | None
    committed: int | None
    """None: the group has committed nothing on this partition yet."""
    answered: bool = True


@dataclass(frozen=True)
class PartitionLag:
    """A partition's lag after one collection, with the branch that produced it."""

    partition: int
    lag: int
    branch: LagBranch
    end: int | None
    committed: int | None
    position: int | None
    """Where the group would resume: the commit, or the log start when there is none."""
    unchanged: int = 0
    """Consecutive collections with the commit unmoved while lag > 0."""
    stale: bool = False


def corrected_end(reported: int, highest_seen: int | None) -> tuple[int, EndBranch]:
    """The true end offset from the reported one and the highest offset read at `reported - 1`.

    Tansu 0.6 answers ListOffsets(latest) with the last batch's base offset + 1; reading that
    batch shows its real last offset. On Apache Kafka the two agree and this is a no-op.
    """
    if highest_seen is not None and highest_seen + 1 > reported:
        return highest_seen + 1, "batch_base_end"
    return reported, "reported"


def partition_lag(
    offsets: PartitionOffsets, previous: PartitionLag | None, stuck_after: int
) -> PartitionLag:
    """Lag = end - committed, with the named branches of DESIGN.md section 7."""
    if not offsets.answered or offsets.end is None or offsets.beginning is None:
        if previous is None:
            return PartitionLag(
                offsets.partition, 0, "partition_missing", None, None, None, stale=True
            )
        return PartitionLag(
            offsets.partition,
            previous.lag,
            "partition_missing",
            previous.end,
            previous.committed,
            previous.position,
            previous.unchanged,
            True,
        )
    branch: LagBranch
    if offsets.committed is None:
        branch, position = "no_commit_yet", offsets.beginning
    elif offsets.committed < offsets.beginning:
        # Retention removed records past the commit; the group resumes at the log start.
        branch, position = "expired_commit", offsets.beginning
    else:
        branch, position = "ok", offsets.committed
    # A commit past the end is a race between the two reads, never negative lag.
    lag = max(0, offsets.end - position)
    moved = previous is None or previous.position != position
    unchanged = 0 if lag == 0 or moved else (previous.unchanged if previous else 0) + 1
    if unchanged >= stuck_after > 0:
        branch = "stuck"
    return PartitionLag(
        offsets.partition, lag, branch, offsets.end, offsets.committed, position, unchanged, False
    )


def group_lag(
    answers: Iterable[PartitionOffsets],
    previous: Mapping[int, PartitionLag],
    stuck_after: int,
) -> dict[int, PartitionLag]:
    """Every partition's lag, each folded with its previous value."""
    return {a.partition: partition_lag(a, previous.get(a.partition), stuck_after) for a in answers}


@dataclass(frozen=True)
class LagSummary:
    """A group's lag in one line: total, and how many partitions took each branch."""

    total: int
    partitions: int
    branches: Mapping[LagBranch, int]
    stale: int
    stuck: tuple[int, ...]


def summarize(lags: Mapping[int, PartitionLag]) -> LagSummary:
    """Totals over partitions; stale partitions count with their last known lag."""
    counts: Counter[LagBranch] = Counter(p.branch for p in lags.values())
    return LagSummary(
        total=sum(p.lag for p in lags.values()),
        partitions=len(lags),
        branches=dict(counts),
        stale=sum(1 for p in lags.values() if p.stale),
        stuck=tuple(sorted(p.partition for p in lags.values() if p.branch == "stuck")),
    )

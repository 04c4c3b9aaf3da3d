"""Which offsets are safe to commit: the contiguous prefix of answered records per partition."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class PartitionOffsets:
    """Outstanding and answered offsets of one partition."""

    outstanding: set[int] = field(default_factory=set)
    highest_done: int = -1
    committed: int | None = None
    highest_polled: int = -1
    epoch: int = 0
    """Bumped when the partition starts over (a broker that lost its log)."""
    floor: int | None = None
    """The lowest offset let go unanswered (handed over): commits never pass it."""


class OffsetTracker:
    """Tracks records from poll to answer; commits never pass an unanswered record.

    Records are answered out of order (buckets, priorities, retries), so the committable
    offset of a partition is its smallest outstanding offset, or one past the highest
    answered when nothing is outstanding.
    """

    def __init__(self) -> None:
        self._partitions: dict[tuple[str, int], PartitionOffsets] = {}
        self._last_epoch: dict[tuple[str, int], int] = {}
        """Per partition, the newest epoch handed out; it outlives `forget`, so a partition
        read again (its logs lost, or owned again) never reuses an epoch whose late answers
        are still on their way (one entry a partition ever held)."""

    def _fresh(self, key: tuple[str, int]) -> PartitionOffsets:
        epoch = self._last_epoch.get(key, -1) + 1
        self._last_epoch[key] = epoch
        state = self._partitions[key] = PartitionOffsets(epoch=epoch)
        return state

    def polled(self, topic: str, partition: int, offset: int) -> int:
        """A record was taken in hand; returns the partition's epoch to answer it with.

        An offset at or below one already polled means the partition started over (the
        broker lost its log and offsets count from 0 again): a new epoch, and the old one's
        late answers no longer count.
        """
        key = (topic, partition)
        state = self._partitions.get(key)
        if state is None or offset <= state.highest_polled:
            state = self._fresh(key)
        state.outstanding.add(offset)
        state.highest_polled = offset
        return state.epoch

    def answered(self, topic: str, partition: int, offset: int, epoch: int = 0) -> None:
        """A record's result is acked by the broker; ignored unless the record is outstanding
        in that epoch.

        A late answer for a forgotten (revoked) partition must not recreate its state with
        `highest_done` past records that were dropped unanswered: the next commit would skip them.
        """
        state = self._partitions.get((topic, partition))
        if state is None or state.epoch != epoch or offset not in state.outstanding:
            return
        state.outstanding.discard(offset)
        state.highest_done = max(state.highest_done, offset)

    def abandoned(self, topic: str, partition: int, offset: int, epoch: int = 0) -> None:
        """A record is let go unanswered (its partition is handed over before it ran): it is
        no longer in flight here, and commits stop short of it so its next owner reads it."""
        state = self._partitions.get((topic, partition))
        if state is None or state.epoch != epoch or offset not in state.outstanding:
            return
        state.outstanding.discard(offset)
        state.floor = offset if state.floor is None else min(state.floor, offset)

    def in_flight(self, topic: str, partition: int) -> int:
        """Records of a partition taken but not yet answered."""
        state = self._partitions.get((topic, partition))
        return len(state.outstanding) if state else 0

    def total_in_flight(self) -> int:
        return sum(len(state.outstanding) for state in self._partitions.values())

    def committable(self) -> dict[tuple[str, int], int]:
        """Offsets to commit now (the next offset to read), only those that moved forward."""
        out: dict[tuple[str, int], int] = {}
        for key, state in self._partitions.items():
            candidates = [state.floor] if state.floor is not None else []
            if state.outstanding:
                candidates.append(min(state.outstanding))
            elif state.highest_done >= 0:
                candidates.append(state.highest_done + 1)
            if not candidates:
                continue
            candidate = min(candidates)
            if state.committed is None or candidate > state.committed:
                out[key] = candidate
        return out

    def mark_committed(self, offsets: dict[tuple[str, int], int]) -> None:
        """Record a successful commit. A partition forgotten while its commit was out (let
        go, or its log restarted) is not brought back: its old log's offset would hold back
        every commit of the new log until the new one passed it."""
        for key, offset in offsets.items():
            state = self._partitions.get(key)
            if state is not None:
                state.committed = max(state.committed or 0, offset)

    def forget(self, topic: str, partition: int) -> None:
        """The partition was revoked; another consumer owns it now."""
        self._partitions.pop((topic, partition), None)

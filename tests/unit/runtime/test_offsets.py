"""OffsetTracker: answers come out of order; a commit never passes an unanswered record."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.runtime.offsets import OffsetTracker

T = "inferbus.req.demo-mlp.interactive"
TP = (T, 0)


def tracker(polled: list[int], answered: list[int], partition: int = 0) -> OffsetTracker:
    offsets = OffsetTracker()
    for offset in polled:
        offsets.polled(T, partition, offset)
    for offset in answered:
        offsets.answered(T, partition, offset)
    return offsets


@pytest.mark.parametrize(
    ("polled", "answered", "committable"),
    [
        pytest.param([], [], {}, id="nothing"),
        pytest.param([0, 1, 2], [], {TP: 0}, id="nothing-answered"),
        pytest.param([0, 1, 2], [0], {TP: 1}, id="first-answered"),
        pytest.param([0, 1, 2], [0, 1, 2], {TP: 3}, id="all-in-order"),
        pytest.param([0, 1, 2], [2, 1], {TP: 0}, id="head-still-out"),
        pytest.param([0, 1, 2, 3], [3, 0, 2], {TP: 1}, id="gap-stops-commit"),
        pytest.param([0, 1, 2], [2, 0, 1], {TP: 3}, id="all-out-of-order"),
        pytest.param([10, 12, 15], [10, 15], {TP: 12}, id="sparse-offsets"),
        pytest.param([10, 12, 15], [10, 12, 15], {TP: 16}, id="sparse-all"),
        # Regression: answers for records never polled moved the commit past them.
        pytest.param([0, 1], [5], {TP: 0}, id="answer-not-polled-ignored"),
        pytest.param([0], [0, 7], {TP: 1}, id="answer-after-done-ignored"),
    ],
)
def test_committable(
    polled: list[int], answered: list[int], committable: dict[tuple[str, int], int]
) -> None:
    assert tracker(polled, answered).committable() == committable


def test_commit_only_when_it_moves_forward() -> None:
    offsets = tracker([0, 1, 2], [0])
    offsets.mark_committed(offsets.committable())

    assert offsets.committable() == {}
    offsets.answered(T, 0, 2)
    assert offsets.committable() == {}  # 1 is still outstanding
    offsets.answered(T, 0, 1)
    assert offsets.committable() == {TP: 3}
    offsets.mark_committed({TP: 3})
    assert offsets.committable() == {}


def test_mark_committed_never_moves_back() -> None:
    offsets = tracker([0, 1, 2, 3], [0, 1, 2, 3])
    offsets.mark_committed({TP: 4})
    offsets.mark_committed({TP: 2})

    offsets.polled(T, 0, 4)
    offsets.answered(T, 0, 4)

    assert offsets.committable() == {TP: 5}


def test_partitions_are_independent() -> None:
    offsets = OffsetTracker()
    for partition in (0, 1):
        for offset in range(3):
            offsets.polled(T, partition, offset)
    offsets.answered(T, 0, 0)
    offsets.answered(T, 1, 2)

    assert offsets.committable() == {(T, 0): 1, (T, 1): 0}
    assert offsets.in_flight(T, 0) == 2
    assert offsets.in_flight(T, 1) == 2
    assert offsets.in_flight(T, 9) == 0
    assert offsets.total_in_flight() == 4


def test_forget_drops_a_revoked_partition() -> None:
    offsets = tracker([0, 1, 2], [0])

    offsets.forget(T, 0)

    assert offsets.committable() == {}
    assert offsets.in_flight(T, 0) == 0
    offsets.forget(T, 0)  # idempotent


def test_late_answer_after_revoke_does_not_commit_past_dropped_records() -> None:
    """Regression: an answer landing after forget() recreated the partition with
    highest_done set, so the next commit skipped the records dropped on revoke."""
    offsets = tracker([0, 1, 2, 3], [])
    offsets.forget(T, 0)  # 0..2 were dropped from the batcher; 3 is still in the engine

    offsets.answered(T, 0, 3)

    assert offsets.committable() == {}


def test_partition_reassigned_after_revoke_starts_over() -> None:
    offsets = tracker([5, 6, 7], [5])
    offsets.mark_committed(offsets.committable())
    offsets.forget(T, 0)

    for offset in (6, 7):  # the new assignment re-reads from the committed offset
        offsets.polled(T, 0, offset)
    offsets.answered(T, 0, 7)

    assert offsets.committable() == {TP: 6}


@given(
    offsets=st.lists(st.integers(0, 10_000), min_size=1, max_size=60, unique=True).map(sorted),
    data=st.data(),
)
def test_commit_never_passes_an_unanswered_record(offsets: list[int], data: st.DataObject) -> None:
    order = data.draw(st.permutations(offsets))
    answered_count = data.draw(st.integers(0, len(order)))
    tracker_ = OffsetTracker()
    for offset in offsets:
        tracker_.polled(T, 0, offset)

    committed: int | None = None
    for offset in order[:answered_count]:
        tracker_.answered(T, 0, offset)
        commit = tracker_.committable().get(TP)
        if commit is not None:
            assert committed is None or commit > committed
            tracker_.mark_committed({TP: commit})
            committed = commit
        unanswered = [o for o in offsets if o not in order[: order.index(offset) + 1]]
        if unanswered:
            assert committed is None or committed <= min(unanswered)
        else:
            assert committed == max(offsets) + 1

    assert tracker_.in_flight(T, 0) == len(offsets) - answered_count


def test_a_partition_that_starts_over_gets_a_new_epoch_and_old_answers_are_ignored() -> None:
    tracker = OffsetTracker()
    old = tracker.polled("t", 0, 500)
    tracker.polled("t", 0, 501)
    tracker.answered("t", 0, 500, old)
    tracker.mark_committed(tracker.committable())

    new = tracker.polled("t", 0, 0)  # the broker lost its log: offsets count from 0 again
    tracker.answered("t", 0, 501, old)  # a late answer from before: no longer counts
    assert new == old + 1
    assert tracker.in_flight("t", 0) == 1
    # Offset 0 is the next to read: the group's old 502 must not survive the new log.
    assert tracker.committable() == {("t", 0): 0}
    tracker.answered("t", 0, 0, new)
    assert tracker.committable() == {("t", 0): 1}


def test_a_late_answer_from_before_forget_does_not_answer_a_new_record() -> None:
    """Forgotten (logs lost, partition owned again) and read again from 0: an answer still
    on its way from the old log, for an offset the new one reached, is not the new record's."""
    tracker = OffsetTracker()
    old = tracker.polled("t", 0, 3)  # in flight when the partition is forgotten
    tracker.forget("t", 0)
    new = [tracker.polled("t", 0, offset) for offset in range(5)]

    tracker.answered("t", 0, 3, old)  # the old record's ack arrives late

    assert old not in new
    assert tracker.in_flight("t", 0) == 5
    for offset in range(3):
        tracker.answered("t", 0, offset, new[offset])
    assert tracker.committable() == {("t", 0): 3}  # the new 3 is still unanswered


@pytest.mark.parametrize(
    ("polled", "answered", "abandoned", "committable"),
    [
        pytest.param([0, 1, 2], [0, 2], [1], {TP: 1}, id="abandoned-in-the-middle-stops-commit"),
        pytest.param([0, 1, 2], [0, 1], [2], {TP: 2}, id="abandoned-last"),
        pytest.param([0, 1, 2], [], [0, 1, 2], {TP: 0}, id="all-abandoned"),
        pytest.param([0, 1, 2], [0, 1, 2], [1], {TP: 3}, id="abandon-after-answer-ignored"),
        pytest.param([4, 5], [5], [9], {TP: 4}, id="abandon-not-polled-ignored"),
    ],
)
def test_commits_stop_at_an_abandoned_record(
    polled: list[int], answered: list[int], abandoned: list[int], committable: dict[object, int]
) -> None:
    offsets = tracker(polled, answered)
    for offset in abandoned:
        offsets.abandoned(T, 0, offset)
    assert offsets.committable() == committable
    assert offsets.in_flight(T, 0) == len(set(polled) - set(answered) - set(abandoned))


def test_a_commit_that_returns_after_its_partition_was_forgotten_does_not_bring_it_back() -> None:
    tracker = OffsetTracker()
    tracker.polled("t", 0, 500)
    tracker.answered("t", 0, 500)
    commit = tracker.committable()
    tracker.forget("t", 0)  # the broker restarted without its logs while the commit was out
    tracker.mark_committed(commit)

    epoch = tracker.polled("t", 0, 0)
    tracker.answered("t", 0, 0, epoch)

    assert tracker.committable() == {("t", 0): 1}

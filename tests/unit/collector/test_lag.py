"""Lag per partition: every named branch, table-driven."""

from __future__ import annotations

import pytest

from scaler.collector.lag import (
    PartitionLag,
    PartitionOffsets,
    corrected_end,
    group_lag,
    partition_lag,
    summarize,
)

STUCK_AFTER = 3


def prev(lag: int, position: int, unchanged: int = 0, end: int = 100) -> PartitionLag:
    return PartitionLag(0, lag, "ok", end, position, position, unchanged)


CASES = [
    # (offsets, previous, lag, branch, stale, unchanged)
    pytest.param(PartitionOffsets(0, 100, 0, 60), None, 40, "ok", False, 0, id="ok"),
    pytest.param(PartitionOffsets(0, 100, 0, 100), None, 0, "ok", False, 0, id="caught-up"),
    pytest.param(
        PartitionOffsets(0, 100, 20, None),
        None,
        80,
        "no_commit_yet",
        False,
        0,
        id="no-commit-yet-counts-from-log-start",
    ),
    pytest.param(
        PartitionOffsets(0, 0, 0, None),
        None,
        0,
        "no_commit_yet",
        False,
        0,
        id="no-commit-yet-empty-partition",
    ),
    pytest.param(
        PartitionOffsets(0, 100, 50, 10),
        None,
        50,
        "expired_commit",
        False,
        0,
        id="commit-before-log-start",
    ),
    pytest.param(
        PartitionOffsets(0, 100, 0, 105),
        None,
        0,
        "ok",
        False,
        0,
        id="commit-past-end-is-zero-not-negative",
    ),
    pytest.param(
        PartitionOffsets(0, None, None, None, answered=False),
        prev(37, 63),
        37,
        "partition_missing",
        True,
        0,
        id="missing-keeps-last-known",
    ),
    pytest.param(
        PartitionOffsets(0, 100, 0, None, answered=False),
        prev(12, 88),
        12,
        "partition_missing",
        True,
        0,
        id="missing-committed-answer",
    ),
    pytest.param(
        PartitionOffsets(0, None, 0, 5),
        None,
        0,
        "partition_missing",
        True,
        0,
        id="missing-without-history",
    ),
    pytest.param(
        PartitionOffsets(0, 120, 0, 63),
        prev(37, 63, unchanged=1),
        57,
        "ok",
        False,
        2,
        id="unchanged-below-threshold",
    ),
    pytest.param(
        PartitionOffsets(0, 120, 0, 63),
        prev(37, 63, unchanged=2),
        57,
        "stuck",
        False,
        3,
        id="stuck-after-n-collections",
    ),
    pytest.param(
        PartitionOffsets(0, 120, 0, 70),
        prev(37, 63, unchanged=5),
        50,
        "ok",
        False,
        0,
        id="moving-again-clears-stuck",
    ),
    pytest.param(
        PartitionOffsets(0, 63, 0, 63),
        prev(0, 63, unchanged=5),
        0,
        "ok",
        False,
        0,
        id="idle-without-lag-is-not-stuck",
    ),
    pytest.param(
        PartitionOffsets(0, 50, 0, None),
        PartitionLag(0, 40, "no_commit_yet", 40, None, 0, 2),
        50,
        "stuck",
        False,
        3,
        id="never-consumed-with-lag-is-stuck",
    ),
]


@pytest.mark.parametrize(("offsets", "previous", "lag", "branch", "stale", "unchanged"), CASES)
def test_partition_lag(
    offsets: PartitionOffsets,
    previous: PartitionLag | None,
    lag: int,
    branch: str,
    stale: bool,
    unchanged: int,
) -> None:
    got = partition_lag(offsets, previous, STUCK_AFTER)
    assert (got.lag, got.branch, got.stale, got.unchanged) == (lag, branch, stale, unchanged)


@pytest.mark.parametrize(
    ("reported", "highest", "end", "branch"),
    [
        pytest.param(11, 10, 11, "reported", id="kafka-agrees"),
        pytest.param(1, 9, 10, "batch_base_end", id="tansu-one-batch-of-ten"),
        pytest.param(11, 16, 17, "batch_base_end", id="tansu-second-batch"),
        pytest.param(5, None, 5, "reported", id="nothing-read-keeps-reported"),
        pytest.param(5, 2, 5, "reported", id="older-record-never-lowers"),
    ],
)
def test_corrected_end(reported: int, highest: int | None, end: int, branch: str) -> None:
    assert corrected_end(reported, highest) == (end, branch)


def test_group_lag_and_summary() -> None:
    answers = [
        PartitionOffsets(0, 10, 0, 4),
        PartitionOffsets(1, 5, 0, None),
        PartitionOffsets(2, None, None, None, answered=False),
    ]
    previous = {2: PartitionLag(2, 7, "ok", 9, 2, 2)}
    lags = group_lag(answers, previous, STUCK_AFTER)
    summary = summarize(lags)
    assert {p: lag.lag for p, lag in lags.items()} == {0: 6, 1: 5, 2: 7}
    assert summary.total == 18
    assert summary.stale == 1
    assert summary.branches == {"ok": 1, "no_commit_yet": 1, "partition_missing": 1}

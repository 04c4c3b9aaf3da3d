"""Per-partition service through membership changes: stalls, changes, moves, kills, repeats."""

from __future__ import annotations

import pytest

from services.bench.handover import (
    Kill,
    OwnerRecord,
    Served,
    Stall,
    change_gaps,
    changes,
    duplicates,
    handover_report,
    kill_gaps,
    longest_in,
    longest_since,
    owner_at,
    stalls,
)


def s(p: int, off: int, avail: float, polled: float | None, worker: str | None = "a") -> Served:
    return Served(p, off, avail, polled, worker)


def rec(t: float, who: str, state: str, *owned: int, standby: bool = False) -> OwnerRecord:
    return OwnerRecord(t, who, state, frozenset(owned), standby)


@pytest.mark.parametrize(
    ("served", "expected"),
    [
        pytest.param([], [], id="nothing"),
        pytest.param(
            [s(0, 0, 1.0, 1.01), s(0, 1, 2.0, 2.02)],
            [(1.0, 1.01), (2.0, 2.02)],
            id="idle-partition-fetch-latency-only",
        ),
        pytest.param(
            [s(0, 0, 1.0, 1.0), s(0, 1, 1.1, 1.9), s(0, 2, 1.2, 1.9), s(0, 3, 1.3, 2.0)],
            [(1.1, 1.9), (1.9, 2.0)],
            id="paused-while-records-wait-then-one-chunk",
        ),
        pytest.param(
            [s(0, 0, 1.0, 1.5), s(0, 1, 1.2, 1.4)],
            [(1.0, 1.5)],
            id="read-out-of-offset-order-adds-nothing",
        ),
        pytest.param(
            [s(0, 0, 1.0, 1.0), s(0, 1, 1.1, None), s(0, 2, 1.5, 2.5)],
            [(1.1, 2.5)],
            id="unanswered-record-waits-until-the-next-read",
        ),
        pytest.param(
            [s(0, 0, 1.0, 1.0), s(0, 1, 1.1, None)],
            [(1.1, 9.0)],
            id="unanswered-tail-waits-until-the-end",
        ),
        pytest.param(
            [s(0, 2, 3.0, 3.1), s(0, 0, 1.0, 1.2), s(0, 1, 2.0, 2.0)],
            [(1.0, 1.2), (3.0, 3.1)],
            id="sorted-by-offset",
        ),
    ],
)
def test_stalls(served: list[Served], expected: list[tuple[float, float]]) -> None:
    found = stalls(served, end_t=9.0).get(0, [])
    flat = [t for x in found for t in (x.start_t, x.end_t)]
    assert flat == pytest.approx([t for pair in expected for t in pair])


def test_stalls_are_per_partition_and_longest_in_counts_whole_overlaps() -> None:
    found = stalls([s(0, 0, 0.0, 0.1), s(1, 0, 0.0, 2.0), s(1, 1, 2.5, 2.6)], end_t=5)
    assert set(found) == {0, 1}
    assert longest_in(found[1], 1.5, 1.6) == Stall(1, 0.0, 2.0)
    assert longest_in(found[1], 2.55, 3.0) == Stall(1, 2.5, 2.6)
    assert longest_in(found[1], 3.0, 4.0) is None
    assert longest_in(found[0], 0.1, 1.0) is None  # touching the end is not overlapping


# A scale-out from one member to two, a scale-in back, and a kill, as the registry says.
SCALE_OUT = [
    rec(-5.0, "a", "loading"),
    rec(-4.0, "a", "ready", 0, 1, 2, 3),
    rec(0.0, "b", "loading"),
    rec(1.0, "b", "ready"),  # join: a gives up 2 and 3
    rec(1.2, "a", "ready", 0, 1),
    rec(1.3, "b", "ready", 2, 3),
    rec(3.0, "a", "ready", 0, 1),  # a refresh: no change
]


def test_a_join_moves_partitions_from_the_old_member_to_the_new() -> None:
    [join] = [c for c in changes(SCALE_OUT) if c.start_t >= 0]
    assert (join.trigger, join.instance, join.start_t, join.end_t) == ("join", "b", 1.0, 1.3)
    assert [(m.partition, m.source, m.target) for m in join.moves] == [(2, "a", "b"), (3, "a", "b")]
    assert [(m.released_t, m.acquired_t) for m in join.moves] == [(1.2, 1.3), (1.2, 1.3)]
    assert owner_at(SCALE_OUT, 1.25) == {0: "a", 1: "a"}
    assert owner_at(SCALE_OUT, 2.0) == {0: "a", 1: "a", 2: "b", 3: "b"}


@pytest.mark.parametrize(
    ("records", "kills", "expected"),
    [
        pytest.param(
            [
                rec(0, "a", "ready", 0, 1),
                rec(0.5, "b", "ready"),
                rec(5, "a", "draining", 0, 1),
                rec(5.2, "b", "ready", 0, 1),
            ],
            [],
            [("join", "a", 0.0), ("leave", "a", 5.0)],
            id="leave",
        ),
        pytest.param(
            [rec(0, "a", "ready", 0), rec(2, "a", "gone"), rec(3.1, "b", "ready", 0)],
            [Kill(1.5, "a", 42)],
            [("join", "a", 0.0), ("kill", "a", 1.5), ("join", "b", 3.1)],
            id="kill-replaces-the-gone",
        ),
        pytest.param(
            [rec(0, "a", "ready", 0), rec(2, "a", "gone")],
            [],
            [("join", "a", 0.0), ("gone", "a", 2.0)],
            id="gone-unasked",
        ),
        pytest.param(
            [rec(0, "a", "ready", standby=True), rec(3, "a", "ready", 0)],
            [],
            [("standby", "a", 0.0), ("promote", "a", 3.0)],
            id="standby-then-promoted",
        ),
    ],
)
def test_change_triggers(
    records: list[OwnerRecord], kills: list[Kill], expected: list[tuple[str, str, float]]
) -> None:
    assert [(c.trigger, c.instance, c.start_t) for c in changes(records, kills)] == expected


def test_triggers_within_a_second_are_one_change() -> None:
    records = [
        rec(0, "a", "ready", 0, 1, 2, 3),
        rec(10.0, "b", "ready"),  # a scale-up by two: b and c ready 0.4 s apart
        rec(10.1, "a", "ready", 0, 1, 2),
        rec(10.2, "b", "ready", 3),
        rec(10.4, "c", "ready"),
        rec(10.5, "a", "ready", 0, 1),
        rec(10.6, "c", "ready", 2),
        rec(20.0, "c", "draining", 2),
    ]
    found = changes(records)
    assert [(c.trigger, c.instance, c.start_t) for c in found] == [
        ("join", "a", 0.0), ("join", "b", 10.0), ("leave", "c", 20.0),
    ]  # fmt: skip
    assert found[1].triggers == ("join b", "join c")
    assert [(m.partition, m.source, m.target) for m in found[1].moves] == [
        (2, "a", "c"), (3, "a", "b"),
    ]  # fmt: skip
    assert found[1].end_t == 10.6
    gaps = change_gaps(found[1], records, {}, {}, partitions=4)
    after = {m["partition"]: m["acquired_after_trigger_s"] for m in gaps.moved}
    assert after == {2: pytest.approx(0.2), 3: pytest.approx(0.2)}  # from c's and b's ready
    assert changes(records, merge_s=0.1)[2].triggers == ("join c",)


def test_a_killed_members_partitions_pair_with_their_next_owner() -> None:
    records = [
        rec(0, "a", "ready", 0, 1),
        rec(0, "b", "ready", 2, 3),
        rec(10.4, "a", "gone"),  # the supervisor's word
        rec(10.6, "b", "ready", 0, 1, 2, 3),
    ]
    kill = next(c for c in changes(records, [Kill(10.0, "a", 7)]) if c.trigger == "kill")
    assert [(m.partition, m.source, m.target, m.released_t, m.acquired_t) for m in kill.moves] == [
        (0, "a", "b", 10.4, 10.6),
        (1, "a", "b", 10.4, 10.6),
    ]
    assert kill.end_t == 10.6


def test_change_gaps_split_stayed_from_moved() -> None:
    served = [
        # partition 0 stays with a; its records are read throughout, one 0.3 s wait
        s(0, 0, 0.9, 0.91),
        s(0, 1, 1.1, 1.4),
        s(0, 2, 1.5, 1.51),
        # partition 2 moves a -> b: a reads it last at 1.1; b first at 1.35
        s(2, 0, 1.0, 1.1),
        s(2, 1, 1.15, 1.35, "b"),
        s(2, 2, 1.2, 1.35, "b"),
    ]
    join = next(c for c in changes(SCALE_OUT) if c.trigger == "join" and c.instance == "b")
    found = stalls(served, end_t=5)
    reads = {(0, "a"): [0.91, 1.4, 1.51], (2, "a"): [1.1], (2, "b"): [1.35, 1.35]}
    gaps = change_gaps(join, SCALE_OUT, found, reads, partitions=4)
    assert gaps.still == pytest.approx({0: 0.3, 1: 0.0})
    assert gaps.longest_still() == (0, pytest.approx(0.3))
    moved = {m["partition"]: m for m in gaps.moved}
    assert set(moved) == {2, 3}
    assert moved[2]["from"] == "a" and moved[2]["to"] == "b"
    assert moved[2]["released_s"] == pytest.approx(0.2)
    assert moved[2]["acquired_s"] == pytest.approx(0.3)
    assert moved[2]["last_read_by_old_s"] == pytest.approx(0.1)
    assert moved[2]["first_read_by_new_s"] == pytest.approx(0.35)
    assert moved[2]["handover_s"] == pytest.approx(0.25)
    assert moved[2]["longest_gap_s"] == pytest.approx(0.2)
    assert moved[2]["gap_since_change_s"] == pytest.approx(0.2)
    assert moved[3]["longest_gap_s"] == 0.0 and moved[3]["first_read_by_new_s"] is None
    assert gaps.to_dict()["longest_still_gap_s"] == pytest.approx(0.3)
    assert gaps.to_dict()["longest_still_gap_since_change_s"] == pytest.approx(0.3)


@pytest.mark.parametrize(
    ("found", "expected"),
    [
        pytest.param([], 0.0, id="no-stall"),
        pytest.param([Stall(0, 1.2, 1.5)], 0.3, id="inside-the-window-whole"),
        pytest.param([Stall(0, 0.4, 1.5)], 0.5, id="begun-before-the-change-counts-from-it"),
        pytest.param([Stall(0, 1.8, 2.6)], 0.8, id="running-past-the-window-counts-whole"),
        pytest.param([Stall(0, 0.2, 0.9)], 0.0, id="over-before-the-change"),
        pytest.param([Stall(0, 0.0, 1.1), Stall(0, 1.3, 1.5)], 0.2, id="longest-after-clipping"),
    ],
)
def test_longest_since_leaves_out_what_began_before(found: list[Stall], expected: float) -> None:
    assert longest_since(found, 1.0, 2.0) == pytest.approx(expected)


def test_a_stall_begun_at_an_overloaded_owner_counts_from_the_change() -> None:
    # Partition 0 stays with a but a stopped reading it at 0.4 s, before b joined at 1.0.
    served = [s(0, 0, 0.3, 0.4), s(0, 1, 0.5, 1.3), s(0, 2, 0.6, 1.3)]
    join = next(c for c in changes(SCALE_OUT) if c.trigger == "join" and c.instance == "b")
    gaps = change_gaps(join, SCALE_OUT, stalls(served, end_t=5), {}, partitions=4)
    assert gaps.still[0] == pytest.approx(0.8)
    assert gaps.still_since_change[0] == pytest.approx(0.3)


@pytest.mark.parametrize(
    ("first_read", "lease_s", "within"),
    [
        pytest.param(10.9, 6.0, True, id="announced-gone-served-within-1s"),
        pytest.param(17.9, 6.0, True, id="at-the-lease-plus-margin"),
        pytest.param(18.1, 6.0, False, id="past-the-lease-plus-margin"),
    ],
)
def test_kill_gaps_against_the_lease(first_read: float, lease_s: float, within: bool) -> None:
    records = [
        rec(0, "a", "ready", 0),
        rec(0, "b", "ready", 1),
        rec(10.5, "a", "gone"),
        rec(first_read - 0.05, "b", "ready", 0, 1),
    ]
    served = [s(0, 0, 9.9, 9.95), s(0, 1, 10.2, first_read, "b")]
    reads = {(0, "a"): [9.95], (0, "b"): [first_read]}
    out = kill_gaps(Kill(10.0, "a", 7), records, stalls(served, end_t=30), reads, lease_s=lease_s)
    assert out["partitions"] == [0]
    assert out["gone_announced_s"] == pytest.approx(0.5)
    assert out["served_again_s"] == pytest.approx(first_read - 10.0)
    assert out["bound_s"] == lease_s + 2
    assert out["within_bound"] is within
    assert out["per_partition"][0]["acquired_by"] == "b"
    assert out["per_partition"][0]["longest_gap_s"] == pytest.approx(first_read - 10.2)


def test_kill_of_a_partition_never_served_again_is_missed() -> None:
    out = kill_gaps(Kill(1.0, "a", 7), [rec(0, "a", "ready", 0)], {}, {}, lease_s=6)
    assert out["served_again_s"] is None and out["within_bound"] is False


@pytest.mark.parametrize(
    ("answers", "expected"),
    [
        pytest.param({"x": ["ok"], "y": ["ok"]}, (0, 0, 0, 0), id="each-once"),
        pytest.param({"x": ["ok"]}, (1, 0, 0, 0), id="one-lost"),
        pytest.param({"x": ["ok", "ok", "ok"], "y": ["ok"]}, (0, 1, 2, 0), id="repeats-dropped"),
        pytest.param(
            {"x": ["ok", "internal_error"], "y": ["ok"]}, (0, 1, 1, 1), id="a-different-answer"
        ),
    ],
)
def test_duplicates(answers: dict[str, list[str]], expected: tuple[int, int, int, int]) -> None:
    out = duplicates(answers, ["x", "y"])
    got = (
        out["lost"],
        out["answered_more_than_once"],
        out["repeat_records"],
        out["answered_twice_after_dedupe"],
    )
    assert got == expected


def test_handover_report_takes_changes_from_the_start_and_sums_up() -> None:
    served = [s(0, 0, 0.5, 0.6), s(2, 0, 1.0, 1.1), s(2, 1, 1.15, 1.35, "b")]
    report = handover_report(
        served,
        SCALE_OUT,
        partitions=4,
        end_t=5.0,
        phases=[("before", 0.0, 1.0), ("step", 1.0, 5.0)],
        from_t=0.0,
    )
    assert [c["trigger"] for c in report["changes"]] == ["join"]
    assert report["moved"]["count"] == 2
    assert report["moved"]["never_acquired"] == 0
    assert report["still"]["trigger"] == "join"
    assert report["per_partition"]["step"]["2"] == pytest.approx(0.2)
    assert report["per_partition"]["before"]["0"] == pytest.approx(0.1)
    assert report["kills"] == []
    # The join's window is [1.0, 2.3]: partition 0's stall at 0.5-0.6 s is outside it.
    assert report["outside_changes"] == {"longest_gap_s": 0.1, "partition": 0, "at_t": 0.5}


def test_a_release_just_before_the_trigger_counts_from_the_release() -> None:
    # a lets partition 2 go 30 ms before b's ready record (within the 50 ms tolerance).
    records = [
        rec(-4.0, "a", "ready", 0, 1, 2, 3),
        rec(0.0, "b", "loading"),
        rec(0.97, "a", "ready", 0, 1, 3),
        rec(1.0, "b", "ready"),
        rec(1.2, "b", "ready", 2),
    ]
    served = [s(2, 0, 0.9, 0.9), s(2, 1, 0.95, 1.3, "b")]
    join = changes(records)[-1]
    gaps = change_gaps(join, records, stalls(served, end_t=5), {}, partitions=4)
    [moved] = gaps.moved
    assert moved["partition"] == 2 and moved["released_s"] == pytest.approx(-0.03)
    assert moved["gap_since_change_s"] == pytest.approx(0.33)  # from the release at 0.97
    assert moved["longest_gap_s"] == pytest.approx(0.35)  # the whole stall, from 0.95

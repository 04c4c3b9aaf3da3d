"""Batcher: size or delay closes a batch; preferred sizes, length buckets, tier priority,
starvation, remove and drain; every item comes out exactly once. Time is passed in."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.topics import TIERS, Tier
from services.worker.batching import Batch, Batcher, BatchPolicy, bucket_of

DELAY = 0.005


def batcher(**policy: Any) -> Batcher[str]:
    fields: dict[str, Any] = {"max_batch_size": 4, "max_queue_delay_s": DELAY, **policy}
    return Batcher(BatchPolicy(**fields))


def add(
    b: Batcher[str],
    item: str,
    *,
    tier: Tier = "interactive",
    samples: int = 1,
    length: int | None = None,
    now: float = 0.0,
) -> None:
    b.add(item, tier=tier, samples=samples, length=length, now=now)


def items(batch: Batch[str] | None) -> list[str]:
    assert batch is not None
    return [entry.item for entry in batch.entries]


def drain_batches(b: Batcher[Any], now: float) -> list[Batch[Any]]:
    out = []
    while (batch := b.next_batch(now)) is not None:
        out.append(batch)
    return out


# ---- size and delay ------------------------------------------------------------------------


def test_a_full_queue_is_due_at_once() -> None:
    b = batcher()
    for i in range(5):
        add(b, f"r{i}")

    assert b.next_due_in(0.0) == 0.0
    assert items(b.next_batch(0.0)) == ["r0", "r1", "r2", "r3"]
    assert b.next_batch(0.0) is None  # r4 waits for its delay
    assert len(b) == 1


def test_a_partial_queue_waits_for_the_delay_of_its_oldest() -> None:
    b = batcher()
    add(b, "a", now=0.0)
    add(b, "b", now=0.004)

    assert b.next_batch(0.004) is None
    assert b.next_due_in(0.001) == pytest.approx(0.004)
    batch = b.next_batch(DELAY)
    assert items(batch) == ["a", "b"]
    assert batch is not None and batch.formed_at == DELAY


def test_full_only_skips_a_due_partial_batch() -> None:
    """Behind a running batch only a full one queues; a partial one waits to grow."""
    b = batcher()
    for i in range(3):
        add(b, f"p{i}", now=0.0)
    assert b.next_batch(DELAY, full_only=True) is None, "due by delay but not full"
    assert b.next_due_in(DELAY) == 0.0
    assert b.next_due_in(DELAY, full_only=True) is None, "no time makes it due: filling does"
    add(b, "p3", now=DELAY)
    assert b.next_due_in(DELAY, full_only=True) == 0.0
    assert items(b.next_batch(DELAY, full_only=True)) == ["p0", "p1", "p2", "p3"]


def test_empty_batcher() -> None:
    b = batcher()

    assert b.next_due_in(0.0) is None
    assert b.next_batch(100.0) is None
    assert len(b) == 0
    assert b.drain_all() == []


def test_zero_delay_serves_every_request_at_once() -> None:
    b = batcher(max_queue_delay_s=0.0)
    add(b, "a")

    assert b.next_due_in(0.0) == 0.0
    assert items(b.next_batch(0.0)) == ["a"]


@pytest.mark.parametrize(
    ("samples", "expected"),
    [
        pytest.param([1, 1, 1, 1], [["r0", "r1", "r2", "r3"]], id="exact-fit"),
        pytest.param([3, 3], [["r0"], ["r1"]], id="second-would-overflow"),
        pytest.param([2, 1, 2], [["r0", "r1"], ["r2"]], id="stops-at-first-overflow"),
        pytest.param([6], [["r0"]], id="oversized-request-alone"),
        pytest.param([1, 6], [["r0"], ["r1"]], id="oversized-after-small"),
    ],
)
def test_multi_sample_requests_never_overflow_a_batch(
    samples: list[int], expected: list[list[str]]
) -> None:
    b = batcher()
    for i, count in enumerate(samples):
        add(b, f"r{i}", samples=count)

    batches = drain_batches(b, now=1.0)

    assert [items(batch) for batch in batches] == expected
    for batch in batches:
        assert batch.samples <= 4 or len(batch.entries) == 1


@pytest.mark.parametrize(
    ("queued", "preferred", "sizes"),
    [
        pytest.param(7, (2, 4), [4, 2, 1], id="largest-preferred-that-fits"),
        pytest.param(8, (2, 4), [4, 4], id="full-queue-uses-preferred"),
        pytest.param(8, (), [8], id="no-preferred-max"),
        pytest.param(3, (4,), [3], id="none-fits-takes-all"),
        pytest.param(20, (8,), [8, 8, 4], id="preferred-below-max"),
    ],
)
def test_preferred_batch_sizes(queued: int, preferred: tuple[int, ...], sizes: list[int]) -> None:
    b = batcher(max_batch_size=8, preferred_batch_sizes=preferred)
    for i in range(queued):
        add(b, f"r{i}")

    assert [batch.samples for batch in drain_batches(b, now=1.0)] == sizes


# ---- length buckets -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("length", "buckets", "index"),
    [
        pytest.param(None, (32, 64), None, id="no-length"),
        pytest.param(10, (), None, id="no-buckets"),
        pytest.param(1, (32, 64), 0, id="short"),
        pytest.param(32, (32, 64), 0, id="at-bound"),
        pytest.param(33, (32, 64), 1, id="next"),
        pytest.param(64, (32, 64), 1, id="last"),
        pytest.param(600, (32, 64), 1, id="over-last"),
    ],
)
def test_bucket_of(length: int | None, buckets: tuple[int, ...], index: int | None) -> None:
    assert bucket_of(length, buckets) == index


def test_length_buckets_keep_long_requests_from_padding_short_ones() -> None:
    b = batcher(max_batch_size=32, length_buckets=(32, 64, 512))
    for i in range(30):
        add(b, f"short{i}", length=20)
    add(b, "long", length=500)
    add(b, "mid", length=40)

    batches = {batch.bucket: batch for batch in drain_batches(b, now=1.0)}

    assert set(batches) == {0, 1, 2}
    assert len(batches[0].entries) == 30
    assert batches[0].pad_length == 32
    assert (items(batches[1]), batches[1].pad_length) == (["mid"], 64)
    assert (items(batches[2]), batches[2].pad_length) == (["long"], 512)


def test_a_request_longer_than_the_last_bucket_keeps_its_length() -> None:
    b = batcher(length_buckets=(32, 64))
    add(b, "a", length=50)
    add(b, "b", length=700)

    batch = b.next_batch(1.0)

    assert batch is not None
    assert batch.bucket == 1
    assert batch.pad_length == 700


def test_no_buckets_means_no_padding_length() -> None:
    b = batcher()
    add(b, "a", length=17)

    batch = b.next_batch(1.0)

    assert batch is not None
    assert (batch.bucket, batch.pad_length) == (None, None)


# ---- tiers and starvation -----------------------------------------------------------------


def test_strict_tier_priority_among_due_queues() -> None:
    b = batcher(starvation_s=10.0)
    add(b, "batch", tier="batch", now=0.0)
    add(b, "interactive", tier="interactive", now=0.001)
    add(b, "critical", tier="critical", now=0.002)

    order = [batch.tier for batch in drain_batches(b, now=1.0)]

    assert order == ["critical", "interactive", "batch"]


def test_a_due_lower_tier_runs_while_a_higher_one_is_still_filling() -> None:
    b = batcher(starvation_s=10.0)
    add(b, "batch", tier="batch", now=0.0)
    add(b, "critical", tier="critical", now=0.004)

    assert items(b.next_batch(DELAY)) == ["batch"]
    assert b.next_batch(DELAY) is None


def test_same_tier_oldest_head_first() -> None:
    b = batcher(length_buckets=(32, 64), starvation_s=10.0)
    add(b, "long", length=60, now=0.0)
    add(b, "short", length=10, now=0.001)

    assert [items(batch) for batch in drain_batches(b, now=1.0)] == [["long"], ["short"]]


def test_a_starved_lower_tier_jumps_the_queue() -> None:
    b = batcher(starvation_s=0.5)
    add(b, "old-batch", tier="batch", now=0.0)
    add(b, "critical", tier="critical", now=0.55)

    assert items(b.next_batch(0.6)) == ["old-batch"]
    assert items(b.next_batch(0.6)) == ["critical"]


def test_not_yet_starved_lower_tier_waits() -> None:
    b = batcher(starvation_s=0.5)
    add(b, "batch", tier="batch", now=0.0)
    add(b, "critical", tier="critical", now=0.0)

    assert [items(batch) for batch in drain_batches(b, now=0.4)] == [["critical"], ["batch"]]


def test_under_constant_critical_load_batch_still_moves() -> None:
    b = batcher(max_batch_size=1, starvation_s=0.05)
    add(b, "batch", tier="batch", now=0.0)
    served_at = None
    for step in range(100):
        now = step * 0.01
        add(b, f"c{step}", tier="critical", now=now)
        batch = b.next_batch(now)
        if batch is not None and batch.tier == "batch":
            served_at = now
            break

    assert served_at is not None
    assert served_at <= 0.05 + DELAY + 0.01


# ---- remove and drain ---------------------------------------------------------------------


def test_remove_drops_matching_items_and_their_samples() -> None:
    b = batcher()
    for i in range(3):
        add(b, f"p0-{i}", samples=1)
        add(b, f"p1-{i}", samples=1)

    dropped = b.remove(lambda item: item.startswith("p1"))

    assert sorted(dropped) == ["p1-0", "p1-1", "p1-2"]
    assert len(b) == 3
    # Three samples left: not full, so the queue waits for its delay again.
    assert b.next_due_in(0.0) == pytest.approx(DELAY)
    assert items(b.next_batch(1.0)) == ["p0-0", "p0-1", "p0-2"]


def test_remove_of_everything_leaves_nothing_due() -> None:
    b = batcher()
    for i in range(6):
        add(b, f"r{i}", tier=TIERS[i % 3])

    assert len(b.remove(lambda item: True)) == 6
    assert b.next_due_in(0.0) is None
    assert b.next_batch(1.0) is None


def test_drain_all_returns_everything_and_empties() -> None:
    b = batcher(length_buckets=(8,))
    add(b, "a", tier="batch", length=3)
    add(b, "b", tier="critical")
    add(b, "c", tier="batch", length=3)

    drained = b.drain_all()

    assert sorted(drained) == ["a", "b", "c"]
    assert drained.index("a") < drained.index("c")
    assert len(b) == 0
    assert b.next_batch(10.0) is None


# ---- property: exactly once, in order, within bounds -------------------------------------

_ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("add"),
            st.sampled_from(TIERS),
            st.integers(1, 5),
            st.one_of(st.none(), st.integers(1, 600)),
        ),
        st.tuples(st.just("tick"), st.floats(0, 0.02)),
        st.tuples(st.just("take")),
        st.tuples(st.just("remove"), st.integers(0, 6)),
    ),
    max_size=80,
)


@given(
    ops=_ops,
    max_batch=st.integers(1, 8),
    preferred=st.lists(st.integers(1, 8), max_size=3),
    buckets=st.sampled_from([(), (32,), (32, 128, 512)]),
)
@settings(max_examples=200, deadline=None)
def test_every_item_comes_out_exactly_once(
    ops: list[tuple[Any, ...]], max_batch: int, preferred: list[int], buckets: tuple[int, ...]
) -> None:
    policy = BatchPolicy(
        max_batch_size=max_batch,
        max_queue_delay_s=DELAY,
        preferred_batch_sizes=tuple(sorted({p for p in preferred if p <= max_batch})),
        length_buckets=buckets,
        starvation_s=0.03,
    )
    b: Batcher[int] = Batcher(policy)
    now = 0.0
    added: dict[int, tuple[Tier, int, int | None]] = {}
    out: list[int] = []
    removed: list[int] = []

    def check(batch: Batch[int]) -> None:
        assert batch.entries
        assert {e.tier for e in batch.entries} == {batch.tier}
        assert {bucket_of(e.length, buckets) for e in batch.entries} == {batch.bucket}
        assert batch.samples <= max_batch or len(batch.entries) == 1
        ids = [e.item for e in batch.entries]
        assert ids == sorted(ids)  # FIFO within a queue
        if batch.pad_length is not None:
            assert all((e.length or 0) <= batch.pad_length for e in batch.entries)

    for op in ops:
        if op[0] == "add":
            _, tier, samples, length = op
            item = len(added)
            added[item] = (tier, samples, length)
            b.add(item, tier=tier, samples=samples, length=length, now=now)
        elif op[0] == "tick":
            now += op[1]
        elif op[0] == "take":
            batch = b.next_batch(now)
            if batch is not None:
                check(batch)
                out.extend(e.item for e in batch.entries)
        else:
            removed.extend(b.remove(lambda item, mod=op[1]: mod > 0 and item % 7 == mod))
        assert len(b) == len(added) - len(out) - len(removed)

    # Everything left is due once its delay has passed: nothing stays behind.
    now += 2 * DELAY  # not exactly DELAY: float sums would leave it a hair short
    for batch in drain_batches(b, now):
        check(batch)
        out.extend(e.item for e in batch.entries)
    assert b.drain_all() == []

    counts = Counter(out + removed)
    assert set(counts) == set(added)
    assert all(count == 1 for count in counts.values())

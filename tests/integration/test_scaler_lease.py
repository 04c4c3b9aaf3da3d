"""Two scalers on the real broker: one acts, the other waits and takes over
(`scaler/lease.py`, `scaler/lease_keeper.py`)."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from infra.kafka import make_producer
from scaler.lease import RENEW_SHARE, LeaseRecord, record_to_json
from scaler.lease_keeper import LeaseKeeper

pytestmark = pytest.mark.integration

LEASE_S = 2.0


async def _started(broker: str, topic: str, holder: str) -> LeaseKeeper:
    keeper = LeaseKeeper(broker, holder=holder, lease_s=LEASE_S, topic=topic)
    await keeper.start()
    return keeper


async def _acquired_within(keeper: LeaseKeeper, seconds: float) -> float:
    """Seconds `keeper` took to hold the lease; fails the test past `seconds`."""
    started = time.monotonic()
    assert await asyncio.wait_for(keeper.acquire(asyncio.Event()), seconds)
    return time.monotonic() - started


async def test_a_standby_takes_over_when_the_holder_dies_and_at_once_when_it_releases(
    broker: str,
) -> None:
    topic = f"lease-{uuid.uuid4().hex[:8]}"
    first = await _started(broker, topic, "first")
    second = third = None
    try:
        await _acquired_within(first, 10.0)
        assert (first.view.holder, first.view.term) == ("first", 1)
        second = await _started(broker, topic, "second")
        stop = asyncio.Event()
        waiting = asyncio.create_task(second.acquire(stop))
        await asyncio.sleep(2 * LEASE_S)  # the holder renews: the standby waits
        assert not waiting.done()
        assert second.view.holder == "first"
        # The holder dies without a word: the standby takes the next term once the lease
        # runs out after the last renewal it read.
        died_at = time.monotonic()
        await first.close()
        await asyncio.wait_for(waiting, LEASE_S + 5.0)
        assert waiting.result() is True
        assert time.monotonic() - died_at >= LEASE_S * 0.6
        assert (second.view.holder, second.view.term) == ("second", 2)
        # A third starts while the second holds it: it waits, until a clean stop's release.
        third = await _started(broker, topic, "third")
        waiting = asyncio.create_task(third.acquire(stop))
        await asyncio.sleep(LEASE_S)
        assert not waiting.done()
        released_at = time.monotonic()
        assert await second.release() == 2
        # The released holder reads who took it (a clean stop hands its workers over).
        assert await second.taken_after(2, LEASE_S) == "third"
        await asyncio.wait_for(waiting, LEASE_S)
        assert time.monotonic() - released_at < LEASE_S
        assert (third.view.holder, third.view.term) == ("third", 3)
    finally:
        for keeper in (first, second, third):
            if keeper is not None:
                await keeper.close()


async def test_a_release_nobody_takes_names_no_next_holder(broker: str) -> None:
    topic = f"lease-{uuid.uuid4().hex[:8]}"
    alone = await _started(broker, topic, "alone")
    try:
        await _acquired_within(alone, 10.0)
        assert await alone.release() == 1
        started = time.monotonic()
        assert await alone.taken_after(1, 0.5) is None
        assert time.monotonic() - started >= 0.5
        assert await alone.release() is None  # it holds nothing now
    finally:
        await alone.close()


async def test_the_holder_stops_acting_when_the_log_names_another(broker: str) -> None:
    """A claim of the next term is written while the holder holds it (a standby that
    judged the lease run out): the holder reads it and stops acting at once."""
    topic = f"lease-{uuid.uuid4().hex[:8]}"
    holder = await _started(broker, topic, "holder")
    producer = make_producer(broker, client_id="lease-test")
    await producer.start()
    try:
        await _acquired_within(holder, 10.0)
        assert not holder.lost.is_set()
        claim = LeaseRecord("claim", "other", 2, LEASE_S, time.time())
        await producer.send_and_wait(topic, record_to_json(claim), key=b"lease")
        await asyncio.wait_for(holder.lost.wait(), 2.0)
        assert (holder.view.holder, holder.view.term) == ("other", 2)
    finally:
        await producer.stop()
        await holder.close()


async def test_a_standby_stops_waiting_when_asked_to(broker: str) -> None:
    topic = f"lease-{uuid.uuid4().hex[:8]}"
    holder = await _started(broker, topic, "holder")
    standby = await _started(broker, topic, "standby")
    try:
        await _acquired_within(holder, 10.0)
        stop = asyncio.Event()
        waiting = asyncio.create_task(standby.acquire(stop))
        await asyncio.sleep(0.5)
        stop.set()
        assert await asyncio.wait_for(waiting, 2.0) is False
    finally:
        await standby.close()
        await holder.close()


async def test_two_scalers_starting_together_on_a_new_log_one_holds_it(broker: str) -> None:
    topic = f"lease-{uuid.uuid4().hex[:8]}"
    keepers = [await _started(broker, topic, name) for name in ("left", "right")]
    stop = asyncio.Event()
    tries = [asyncio.create_task(k.acquire(stop)) for k in keepers]
    try:
        done, pending = await asyncio.wait(tries, timeout=10.0, return_when="FIRST_COMPLETED")
        assert len(done) == 1
        await asyncio.sleep(2 * LEASE_S)  # the other keeps waiting: the holder renews
        assert all(not t.done() for t in pending)
        (won,) = [k for k, t in zip(keepers, tries, strict=True) if t in done]
        assert {k.view.holder for k in keepers} == {won.holder}
        assert {k.view.term for k in keepers} == {1}
    finally:
        stop.set()
        await asyncio.gather(*tries, return_exceptions=True)
        for keeper in keepers:
            await keeper.close()


async def test_a_holder_that_cannot_read_the_log_stops_acting(broker: str) -> None:
    """Its renewals are still written (acknowledged), but it reads nothing back, so it
    would not see a newer term's claim: it stops acting within the fence."""
    topic = f"lease-{uuid.uuid4().hex[:8]}"
    holder = await _started(broker, topic, "holder")
    try:
        await _acquired_within(holder, 10.0)
        holder._consumer.pause(holder._tp)
        paused_at = time.monotonic()
        await asyncio.wait_for(holder.lost.wait(), LEASE_S)
        took = time.monotonic() - paused_at
        assert took <= 0.6 * LEASE_S + 0.5
    finally:
        await holder.close()


async def test_a_standby_that_cannot_read_the_log_does_not_claim(broker: str) -> None:
    """The standby's reads stall while the holder renews: the renewals it has not read are
    past the end it asks the broker for, so it does not claim, though it has heard no
    renewal for longer than the lease; when it reads again it waits on."""
    topic = f"lease-{uuid.uuid4().hex[:8]}"
    holder = await _started(broker, topic, "holder")
    standby = await _started(broker, topic, "standby")
    stop = asyncio.Event()
    waiting = None
    try:
        await _acquired_within(holder, 10.0)
        waiting = asyncio.create_task(standby.acquire(stop))
        await asyncio.sleep(LEASE_S / 2)
        standby._consumer.pause(standby._tp)
        await asyncio.sleep(2 * LEASE_S)
        assert not waiting.done()
        assert not holder.lost.is_set()
        standby._consumer.resume(standby._tp)
        await asyncio.sleep(LEASE_S)
        assert not waiting.done() and not holder.lost.is_set()
        assert (standby.view.holder, standby.view.term) == ("holder", 1)
    finally:
        stop.set()
        if waiting is not None:
            await asyncio.gather(waiting, return_exceptions=True)
        await standby.close()
        await holder.close()


async def test_a_stop_before_a_claim_is_read_back_releases_it(broker: str) -> None:
    """The claim is written but its reader stalls; a stop then releases the claim, which
    won on the log: the next scaler takes the lease at once, not a lease later."""
    topic = f"lease-{uuid.uuid4().hex[:8]}"
    first = await _started(broker, topic, "first")
    second = None
    try:
        await asyncio.sleep(0.5)  # caught up on the empty log
        first._consumer.pause(first._tp)
        stop = asyncio.Event()
        claiming = asyncio.create_task(first.acquire(stop))
        await asyncio.sleep(LEASE_S * RENEW_SHARE + 2.0)  # its wait on a new log, the claim
        stop.set()
        assert await asyncio.wait_for(claiming, 2.0) is False
        second = await _started(broker, topic, "second")
        took = await _acquired_within(second, LEASE_S)
        assert took < LEASE_S * RENEW_SHARE + 1.5
        assert (second.view.holder, second.view.term) == ("second", 2)
    finally:
        for keeper in (first, second):
            if keeper is not None:
                await keeper.close()

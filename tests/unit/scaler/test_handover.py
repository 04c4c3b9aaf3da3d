"""A clean stop hands its groups over: its workers serve until the next holder's are ready
(`scaler/handover.py`)."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from scaler.handover import hand_over, waiting_groups
from scaler.registry import RegistryTable, fold_all
from schemas.telemetry import InstanceRecord, InstanceState

NOW = datetime(2026, 1, 1, tzinfo=UTC)
GROUP = "inferbus.workers.m.interactive"
OTHER = "inferbus.workers.m.batch"


def rec(
    iid: str,
    state: InstanceState = "ready",
    *,
    group: str = GROUP,
    groups: tuple[str, ...] = (),
    age_s: float = 0.0,
    lease_s: float | None = 10.0,
    standby: bool = False,
) -> InstanceRecord:
    return InstanceRecord(
        instance_id=iid,
        model="m",
        tiers=["interactive"],
        group=group,
        groups=list(groups),
        state=state,
        started_at=NOW - timedelta(seconds=60),
        updated_at=NOW - timedelta(seconds=age_s),
        lease_s=lease_s,
        standby=standby,
    )


MINE = frozenset({"w1"})


@pytest.mark.parametrize(
    ("records", "ours", "waiting"),
    [
        pytest.param([rec("w1")], {GROUP: MINE}, {GROUP: (0, 1)}, id="only-ours"),
        pytest.param([rec("w1"), rec("n1")], {GROUP: MINE}, {}, id="theirs-ready"),
        pytest.param(
            [rec("w1"), rec("n1", standby=True)], {GROUP: MINE}, {}, id="theirs-standing-by"
        ),
        pytest.param(
            [rec("w1"), rec("n1", "warming")], {GROUP: MINE}, {GROUP: (0, 1)}, id="still-warming"
        ),
        pytest.param(
            [rec("w1"), rec("n1", age_s=30)], {GROUP: MINE}, {GROUP: (0, 1)}, id="theirs-dead"
        ),
        pytest.param(
            [rec("w1"), rec("n1", "gone")], {GROUP: MINE}, {GROUP: (0, 1)}, id="theirs-gone"
        ),
        pytest.param(
            [rec("w1"), rec("n1", group=OTHER)], {GROUP: MINE}, {GROUP: (0, 1)}, id="elsewhere"
        ),
        pytest.param(
            [rec("w1"), rec("n1", group=OTHER, groups=(OTHER, GROUP))],
            {GROUP: MINE},
            {},
            id="serving-it-among-its-groups",
        ),
        pytest.param(
            [rec("w1"), rec("w2"), rec("n1")],
            {GROUP: frozenset({"w1", "w2"})},
            {GROUP: (1, 2)},
            id="as-many-as-ours",
        ),
        pytest.param([rec("n1")], {GROUP: frozenset()}, {}, id="none-of-ours"),
        # Ours still starting serve nobody yet: nobody needs to replace them.
        pytest.param([rec("w1", "warming")], {GROUP: MINE}, {}, id="ours-still-starting"),
        pytest.param(
            [rec("w1"), rec("w2", "warming"), rec("n1")],
            {GROUP: frozenset({"w1", "w2"})},
            {},
            id="as-many-as-ours-ready",
        ),
    ],
)
def test_waiting_groups(
    records: list[InstanceRecord],
    ours: dict[str, frozenset[str]],
    waiting: dict[str, tuple[int, int]],
) -> None:
    assert waiting_groups(fold_all(records), ours, NOW) == waiting


class Lease:
    """Released as `term`; taken by `taker` after `takes_s` (None: by nobody)."""

    def __init__(self, term: int | None, taker: str | None, takes_s: float = 0.0) -> None:
        self.term, self.taker, self.takes_s = term, taker, takes_s
        self.view = SimpleNamespace(holder=taker)
        self.released = False
        self.asked: tuple[int, float] | None = None

    async def release(self) -> int | None:
        self.released = True
        return self.term

    async def taken_after(self, term: int, within_s: float) -> str | None:
        self.asked = (term, within_s)
        await asyncio.sleep(min(self.takes_s, within_s))
        return self.taker if self.takes_s <= within_s else None


class Registry:
    """Only ours, until `ready_after` calls to `table`; then the next holder's too."""

    def __init__(self, ready_after: int | None, lease: Lease) -> None:
        self.calls, self.ready_after, self.lease = 0, ready_after, lease
        self.read_before_release = False

    def table(self) -> RegistryTable:
        self.calls += 1
        self.read_before_release |= not self.lease.released
        now = datetime.now(UTC)
        records = [rec("w1").model_copy(update={"updated_at": now})]
        if self.ready_after is not None and self.calls > self.ready_after:
            records.append(rec("n1").model_copy(update={"updated_at": now}))
        return fold_all(records)


async def _hand_over(lease: Lease, registry: Registry, **kw: Any) -> float:
    loop = asyncio.get_running_loop()
    started = loop.time()
    await asyncio.wait_for(hand_over(lease, {GROUP: MINE}, registry.table, **kw), 10.0)
    return loop.time() - started


async def test_it_waits_for_the_next_holders_workers(caplog: pytest.LogCaptureFixture) -> None:
    lease = Lease(3, "next")
    registry = Registry(2, lease)
    with caplog.at_level(logging.INFO):
        took = await _hand_over(lease, registry)
    assert lease.released and lease.asked == (3, 2.0)
    assert registry.calls == 3 and not registry.read_before_release
    assert took >= 0.4  # two polls with only ours ready
    assert "event=handed_over to=next" in caplog.text


async def test_it_stops_waiting_at_its_limit_and_says_what_was_left(
    caplog: pytest.LogCaptureFixture,
) -> None:
    lease = Lease(3, "next")
    registry = Registry(None, lease)
    with caplog.at_level(logging.INFO):
        took = await _hand_over(lease, registry, limit_s=0.6)
    assert 0.6 <= took < 2.0
    assert "event=handover_cut to=next" in caplog.text
    assert f"waiting={GROUP}=0/1" in caplog.text


async def test_it_stops_waiting_when_the_next_holder_no_longer_holds_the_lease(
    caplog: pytest.LogCaptureFixture,
) -> None:
    lease = Lease(3, "next")
    registry = Registry(None, lease)
    asyncio.get_running_loop().call_later(0.3, setattr, lease.view, "holder", None)
    with caplog.at_level(logging.INFO):
        took = await _hand_over(lease, registry, limit_s=5.0)
    assert 0.3 <= took < 1.5
    assert "it no longer holds the lease" in caplog.text


@pytest.mark.parametrize(
    ("lease", "why"),
    [
        pytest.param(Lease(3, None, takes_s=9.0), "event=handover_none", id="no-standby"),
        pytest.param(Lease(None, "next"), "", id="release-not-written"),
    ],
)
async def test_with_nobody_to_hand_over_to_it_returns_at_once(
    lease: Lease, why: str, caplog: pytest.LogCaptureFixture
) -> None:
    registry = Registry(None, lease)
    with caplog.at_level(logging.INFO):
        took = await _hand_over(lease, registry, claim_wait_s=0.3)
    assert took < 1.0
    assert registry.calls == 0
    assert why in caplog.text

"""recall: a restarted scaler replays its decision records into the state it had."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

import pytest

from scaler.actuators.decisions import Written, decision_record, what_it_says, worth_writing
from scaler.config import PolicyConfig
from scaler.policy import POLICIES
from scaler.recall import Recorded, memory_s, recall, recorded, ticks_of
from scaler.recall_reader import start_offset
from scaler.signals import GroupSignals, ScalerState
from tests.unit.scaler.conftest import make_signals

BURSTY = "inferbus.workers.m.interactive"
STEADY = "inferbus.workers.m.batch"


def _arrivals(group: str, t: float) -> float:
    """A 30 s burst every 2 minutes with nothing between, or a steady 600/s."""
    if group == STEADY:
        return 600.0
    return 1500.0 if t % 120 < 30 else 0.0


def _live(ticks: int, *, idle_every_s: float) -> tuple[list[Any], ScalerState]:
    """Run the slo policy as the service does: the records it writes (`worth_writing`, a
    JSON round trip) and the state it ends with."""
    decide, config = POLICIES["slo"], PolicyConfig()
    state = ScalerState()
    replicas = {BURSTY: 4, STEADY: 4}
    written: dict[str, Written] = {}
    records: list[Any] = []
    for k in range(1, ticks + 1):
        now = 1000.0 + 5.0 * k
        signals = []
        for group in (BURSTY, STEADY):
            rps = _arrivals(group, now)
            signals.append(
                make_signals(
                    group=group,
                    tier="interactive" if group == BURSTY else "batch",
                    collected_at=now,
                    replicas=replicas[group],
                    ready_replicas=replicas[group],
                    arrival_rps=rps,
                    lag=0 if rps == 0 else 10,
                    utilization=min(1.0, rps / (300.0 * replicas[group])),
                )
            )
        decision, state = decide(signals, state, config, now)
        for s, d in zip(signals, decision.groups, strict=True):
            said = what_it_says(d, applied=True, error=None, acting=True)
            if worth_writing(said, s, written.get(s.group), now=now, idle_every_s=idle_every_s):
                raw = decision_record(d, policy="slo", at=now, signals=s)
                records.append(json.loads(json.dumps(raw)))
                written[s.group] = Written(said, now, s)
            replicas[s.group] = d.desired
    return records, state


@pytest.mark.parametrize("idle_every_s", [0.0, 25.0], ids=["every-tick", "idle-holds-thinned"])
def test_the_records_replay_into_the_state_the_scaler_had(idle_every_s: float) -> None:
    records, live = _live(200, idle_every_s=idle_every_s)
    if idle_every_s:
        assert len(records) < 400, "the idle holds between bursts were thinned"
    got = recall(
        records,
        POLICIES["slo"],
        PolicyConfig(),
        since=0.0,
        until=math.inf,
        interval_s=5.0,
        idle_every_s=idle_every_s or 25.0,
    )
    assert got.ticks == 200
    assert got.skipped == {}
    assert got.state == live


def test_a_group_no_longer_run_and_records_out_of_the_memory_are_left_out() -> None:
    records, _ = _live(40, idle_every_s=0.0)
    got = recall(
        records,
        POLICIES["slo"],
        PolicyConfig(),
        since=1000.0 + 5.0 * 21,
        until=1000.0 + 5.0 * 38,
        interval_s=5.0,
        idle_every_s=25.0,
        groups=[STEADY],
    )
    assert got.skipped == {
        "older than the memory": 40,
        "written after now (a clock ahead of this one)": 4,
    }
    assert got.dropped == (BURSTY,)
    assert got.ticks == 18
    assert got.since == 1000.0 + 5.0 * 21
    assert [g.group for g in got.state.groups] == [STEADY]


def _record(**changes: Any) -> dict[str, Any]:
    records, _ = _live(1, idle_every_s=0.0)
    return {**records[0], **changes}


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        pytest.param("undecodable", "not a JSON object", id="not-an-object"),
        pytest.param(_record(schema_version=2), "another schema version", id="schema"),
        pytest.param(_record(at=None), "no finite 'at'", id="no-at"),
        pytest.param(_record(at=math.inf), "no finite 'at'", id="infinite-at"),
        pytest.param(_record(at=True), "no finite 'at'", id="boolean-at"),
        pytest.param(
            _record(signals=None), "no signals (the group was not collected)", id="no-signals"
        ),
        pytest.param(_record(signals=[1]), "signals not an object", id="signals-a-list"),
        pytest.param(
            _record(signals={**_record()["signals"], "rps": 1}),
            "signals the policy would refuse",
            id="an-unknown-field",
        ),
        pytest.param(
            _record(signals={**_record()["signals"], "replicas": -1}),
            "signals the policy would refuse",
            id="a-negative-count",
        ),
    ],
)
def test_a_record_that_cannot_be_replayed_says_why(raw: Any, why: str) -> None:
    assert recorded(raw) == why
    got = recall(
        [raw],
        POLICIES["slo"],
        PolicyConfig(),
        since=0.0,
        until=math.inf,
        interval_s=5.0,
        idle_every_s=25.0,
    )
    assert got.skipped == {why: 1}
    assert got.state == ScalerState()
    assert got.since is None


def _at(t: float, group: str = BURSTY, **changes: Any) -> Recorded:
    return Recorded(t, make_signals(group=group, collected_at=t - 0.01, **changes))


IDLE: dict[str, Any] = {"arrival_rps": 0.0, "lag": 0}


@pytest.mark.parametrize(
    ("records", "shape"),
    [
        pytest.param(
            [_at(5.0), _at(5.02, STEADY), _at(10.0), _at(10.03, STEADY)],
            [[BURSTY, STEADY], [BURSTY, STEADY]],
            id="two-ticks-of-two-groups",
        ),
        pytest.param(
            [_at(5.0), _at(5.2)], [[BURSTY], [BURSTY]], id="a-group-twice-opens-the-next-tick"
        ),
        pytest.param(
            [_at(5.0), _at(5.0), _at(5.01, STEADY)],
            [[BURSTY, STEADY]],
            id="a-record-written-twice-counts-once",
        ),
        pytest.param(
            [_at(5.0), _at(8.0, STEADY)], [[BURSTY], [STEADY]], id="half-an-interval-after"
        ),
        pytest.param(
            [_at(5.0, **IDLE), _at(5.01, STEADY), _at(10.0, STEADY), _at(25.0, STEADY)],
            [[BURSTY, STEADY], [BURSTY, STEADY], [BURSTY, STEADY]],
            id="an-idle-hold-is-given-again-in-its-place-within-the-idle-cadence",
        ),
        pytest.param(
            [_at(5.0, **IDLE), _at(5.01, STEADY), _at(35.0, STEADY)],
            [[BURSTY, STEADY], [STEADY]],
            id="not-past-the-idle-cadence",
        ),
        pytest.param(
            [_at(5.0, **IDLE), _at(25.0, **IDLE)],
            [[BURSTY]] * 5,
            id="ticks-where-every-group-held-idle-are-given-back",
        ),
        pytest.param(
            [_at(5.0, **IDLE), _at(5.01, STEADY), _at(25.0, STEADY)],
            [[BURSTY, STEADY], [BURSTY, STEADY]],
            id="no-tick-given-back-where-a-busy-group-wrote-nothing",
        ),
        pytest.param(
            [_at(5.0, **IDLE), _at(100.0, **IDLE)],
            [[BURSTY]] * 7,
            id="a-silence-past-the-idle-cadence-was-the-scaler-away",
        ),
        pytest.param(
            [_at(5.0), _at(5.01, STEADY), _at(10.0, STEADY)],
            [[BURSTY, STEADY], [STEADY]],
            id="a-busy-group-missing-is-not-made-up",
        ),
        pytest.param([_at(1.0), _at(5.0)], [[BURSTY]], id="before-since-is-left-out"),
    ],
)
def test_records_are_regrouped_into_the_ticks_that_wrote_them(
    records: list[Recorded], shape: list[list[str]]
) -> None:
    ticks = ticks_of(records, since=2.0, interval_s=5.0, idle_every_s=25.0)
    assert [[s.group for s in t.signals] for t in ticks] == shape


def test_an_idle_hold_given_again_is_moved_to_its_tick() -> None:
    first = _at(5.0, **IDLE)
    ticks = ticks_of(
        [first, _at(5.01, STEADY), _at(10.0, STEADY)], since=0.0, interval_s=5.0, idle_every_s=25.0
    )
    again = ticks[1].signals[0]
    assert again == dataclasses.replace(first.signals, collected_at=first.signals.collected_at + 5)


def test_the_memory_read_back_reaches_as_far_as_the_longest_one() -> None:
    config = PolicyConfig()
    assert memory_s(config) == config.burst_memory_s
    longer = dataclasses.replace(config, headroom_memory_s=config.burst_memory_s + 60)
    assert memory_s(longer) == config.burst_memory_s + 60


def test_signals_survive_the_record_round_trip() -> None:
    records, _ = _live(1, idle_every_s=0.0)
    got = recorded(records[0])
    assert isinstance(got, Recorded)
    assert isinstance(got.signals, GroupSignals)
    assert got.signals.group == BURSTY


@pytest.mark.parametrize(
    ("found", "first", "end", "most", "start"),
    [
        pytest.param(40, 0, 100, 80, 40, id="the-broker-s-offset-for-the-time"),
        pytest.param(0, 0, 100, 80, 20, id="at-most-the-newest"),
        pytest.param(0, 30, 100, 80, 30, id="not-before-the-log-s-first"),
        pytest.param(None, 0, 100, 80, 100, id="nothing-since-the-time"),
        pytest.param(120, 0, 100, 80, 100, id="not-past-the-end"),
    ],
)
def test_where_the_read_back_starts(
    found: int | None, first: int, end: int, most: int, start: int
) -> None:
    assert start_offset(found, first=first, end=end, most=most) == start

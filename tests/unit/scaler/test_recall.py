"""recall: a restarted scaler replays its decision records into the state it had."""

from __future__ import annotations

import dataclasses
import json
import math
import time
from typing import Any

import pytest

from scaler.actuators.decisions import Written, decision_record, what_it_says, worth_writing
from scaler.checkpoint import CHECKPOINT_EVERY_S, checkpoint_due, config_digest, tick_checkpoints
from scaler.config import PolicyConfig
from scaler.policy import POLICIES
from scaler.recall import (
    Recorded,
    Unreadable,
    memory_s,
    recall,
    recorded,
    replay_span_s,
    ticks_of,
    to_resume,
)
from scaler.recall_reader import decoded, read_decisions, start_offset
from scaler.settings import IDLE_HOLD_EVERY_MAX_S
from scaler.signals import GroupSignals, ScalerState
from tests.unit.scaler.conftest import make_signals

BURSTY = "inferbus.workers.m.interactive"
STEADY = "inferbus.workers.m.batch"
START = 1000.0


def _arrivals(group: str, t: float) -> float:
    """A 30 s burst every 2 minutes with nothing between; a job of 600/s for 4 minutes in
    every 6 (so that both groups are idle at times)."""
    if group == STEADY:
        return 600.0 if t % 360 < 240 else 0.0
    return 1500.0 if t % 120 < 30 else 0.0


def _live(
    ticks: int,
    *,
    idle_every_s: float,
    tick_at: bool = True,
    budget: int | None = None,
    checkpoints: bool = False,
    steady_unread: range = range(0),
) -> tuple[list[Any], ScalerState]:
    """Run the slo policy as the service does: the records it writes (left out by
    `worth_writing`, written a few ms after the tick, a JSON round trip), and the state it
    ends with. `tick_at` False: records as a scaler before `tick_at` wrote them.
    `checkpoints`: the memory written beside the decisions every `CHECKPOINT_EVERY_S`.
    `steady_unread`: the ticks at which the steady group's collection fails, and the
    collector gives its last signals again, flagged stale."""
    decide = POLICIES["slo"]
    config = PolicyConfig(max_total_replicas=budget)
    state = ScalerState()
    replicas = {BURSTY: 4, STEADY: 4}
    written: dict[str, Written] = {}
    records: list[Any] = []
    checkpoint_at: float | None = None
    collected: dict[str, GroupSignals] = {}
    for k in range(1, ticks + 1):
        now = START + 5.0 * k
        signals = []
        for group in (BURSTY, STEADY):
            rps = _arrivals(group, now)
            if group == STEADY and k in steady_unread:
                signals.append(dataclasses.replace(collected[group], stale=True))
                continue
            collected[group] = make_signals(
                group=group,
                tier="interactive" if group == BURSTY else "batch",
                # Collected a moment before the tick; a power of two, so that a hold
                # given again at a later tick is moved there exactly.
                collected_at=now - 0.25,
                replicas=replicas[group],
                ready_replicas=replicas[group],
                arrival_rps=rps,
                lag=0 if rps == 0 else 10,
                utilization=min(1.0, rps / (300.0 * replicas[group])),
                queue_p99_ms=None if rps == 0 else 20.0,
                e2e_p99_ms=None if rps == 0 else 180.0,
            )
            signals.append(collected[group])
        decision, state = decide(signals, state, config, now)
        due = checkpoints and checkpoint_due(now, checkpoint_at)
        digest = config_digest(config)
        got = tick_checkpoints(state, signals, policy="slo", config=digest) if due else None
        memory = None if isinstance(got, str) else got
        if memory is not None:
            checkpoint_at = now
        for n, (s, d) in enumerate(zip(signals, decision.groups, strict=True)):
            said = what_it_says(d, applied=True, error=None, acting=True)
            kept = None if memory is None else memory[s.group]
            if kept is not None or worth_writing(
                said, s, written.get(s.group), now=now, idle_every_s=idle_every_s
            ):
                raw = decision_record(
                    d,
                    policy="slo",
                    at=now + 0.003 * (n + 1),
                    tick_at=now if tick_at else None,
                    signals=s,
                    checkpoint=kept,
                )
                records.append(json.loads(json.dumps(raw)))
                written[s.group] = Written(said, now, s)
            replicas[s.group] = d.desired
    return records, state


def _recall(records: list[Any], **options: Any) -> Any:
    kwargs: dict[str, Any] = {
        "since": 0.0,
        "until": math.inf,
        "interval_s": 5.0,
        "idle_every_s": IDLE_HOLD_EVERY_MAX_S,
        **options,
    }
    return recall(records, POLICIES["slo"], PolicyConfig(), policy_name="slo", **kwargs)


@pytest.mark.parametrize("ticks", [71, 143, 200, 300], ids=lambda n: f"{n}-ticks")
@pytest.mark.parametrize(
    "idle_every_s",
    [
        pytest.param(0.0, id="every-tick"),
        pytest.param(25.0, id="idle-holds-thinned"),
        pytest.param(10.0, id="thinned-at-another-cadence"),
        pytest.param(30.0, id="thinned-at-the-longest-cadence"),
    ],
)
@pytest.mark.parametrize("checkpoints", [False, True], ids=["replayed", "from-a-checkpoint"])
def test_the_records_replay_into_the_state_the_scaler_had(
    idle_every_s: float, ticks: int, checkpoints: bool
) -> None:
    """Restarted at the next tick's time, whether the run ended on a tick that wrote a
    record or on holds left out (71 and 143 end idle); replayed from the first record, or
    from the newest checkpoint."""
    records, live = _live(ticks, idle_every_s=idle_every_s, checkpoints=checkpoints)
    if idle_every_s:
        assert len(records) < 2 * ticks - 10, "the idle holds were thinned"
    got = _recall(records, until=START + 5.0 * ticks)
    assert got.ticks == ticks
    assert got.skipped == {}
    assert (got.from_checkpoint is not None) is checkpoints
    assert got.state == live


def _next(state: ScalerState) -> list[tuple[str, int, tuple[str, ...]]]:
    """What the policy decides on one more tick, a burst starting, from `state`."""
    now = START + 5.0 * 201
    signals = [
        make_signals(group=BURSTY, collected_at=now, arrival_rps=1500.0, replicas=4),
        make_signals(group=STEADY, tier="batch", collected_at=now, replicas=4),
    ]
    decision, _ = POLICIES["slo"](signals, state, PolicyConfig(), now)
    return [(d.group, d.desired, tuple(r.code for r in d.reasons)) for d in decision.groups]


def test_records_without_the_tick_s_clock_replay_into_the_same_decisions() -> None:
    """Written before records carried `tick_at`: replayed at the times they were written,
    a few ms after their ticks, the state is the scaler's to those ms."""
    records, live = _live(200, idle_every_s=25.0, tick_at=False)
    got = _recall(records)
    assert got.ticks == 200
    assert [len(g.load_samples) for g in got.state.groups] == [
        len(g.load_samples) for g in live.groups
    ]
    assert _next(got.state) == _next(live)


def test_ticks_where_both_groups_were_idle_are_given_back() -> None:
    records, _ = _live(200, idle_every_s=25.0)
    written = {r["tick_at"] for r in records}
    ticks = _recall(records, until=START + 5.0 * 200).ticks
    assert ticks == 200
    assert len(written) < 190, "some ticks wrote nothing"


def test_records_out_of_the_memory_and_groups_no_longer_run_are_left_out() -> None:
    records, _ = _live(40, idle_every_s=0.0)
    got = _recall(
        records,
        since=START + 5.0 * 21,
        until=START + 5.0 * 38,
        groups=[STEADY],
    )
    assert got.skipped == {
        "older than the replay": 40,
        "written after now (a clock ahead of this one)": 4,
    }
    assert got.ticks == 18
    assert got.since == START + 5.0 * 21
    assert got.dropped == (BURSTY,)
    assert [g.group for g in got.state.groups] == [STEADY]


def test_only_the_records_of_a_scaler_like_this_one_are_replayed() -> None:
    acting, _ = _live(20, idle_every_s=0.0)
    dry = [{**r, "acting": False, "tick_at": r["tick_at"] + 1.0} for r in acting]
    got = _recall([*acting, *dry])
    assert got.ticks == 20
    assert got.skipped == {"a dry run's": 40}
    assert _recall([*acting, *dry], acting=False).skipped == {"an acting scaler's": 40}


def test_a_group_gone_from_the_records_is_forgotten_as_the_scaler_forgot_it() -> None:
    """A retired group is dropped live; kept in the replay, it would be decided stale tick
    after tick and hold a share of the budget from the groups still running."""
    records, _ = _live(60, idle_every_s=0.0, budget=8)
    gone_after = START + 5.0 * 10
    left = [r for r in records if r["group"] != STEADY or r["tick_at"] <= gone_after]
    got = recall(
        left,
        POLICIES["slo"],
        PolicyConfig(max_total_replicas=8),
        since=0.0,
        until=math.inf,
        interval_s=5.0,
        idle_every_s=IDLE_HOLD_EVERY_MAX_S,
        policy_name="slo",
    )
    assert [g.group for g in got.state.groups] == [BURSTY]


def test_a_group_not_collected_at_a_tick_is_decided_stale_and_kept() -> None:
    records, _ = _live(20, idle_every_s=0.0)
    uncollected = [
        {**r, "signals": None} if r["group"] == STEADY and r["tick_at"] > START + 50 else r
        for r in records
    ]
    got = _recall(uncollected)
    assert got.state.get(STEADY).failed_collections == 10
    assert [g.group for g in got.state.groups] == [BURSTY, STEADY]


def _record(**changes: Any) -> dict[str, Any]:
    records, _ = _live(1, idle_every_s=0.0)
    return {**records[0], **changes}


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        pytest.param("a string", "not a JSON object", id="not-an-object"),
        pytest.param(Unreadable("not JSON"), "not JSON", id="not-json"),
        pytest.param(_record(schema_version=2), "another schema version", id="schema"),
        pytest.param(_record(at=None, tick_at=None), "no finite 'tick_at' or 'at'", id="no-time"),
        pytest.param(
            _record(at=math.inf, tick_at=None), "no finite 'tick_at' or 'at'", id="infinite"
        ),
        pytest.param(_record(tick_at=True, at=None), "no finite 'tick_at' or 'at'", id="bool"),
        pytest.param(_record(group=7), "no group", id="no-group"),
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
        pytest.param(_record(group=STEADY), "signals of another group", id="another-group"),
    ],
)
def test_a_record_that_cannot_be_replayed_says_why(raw: Any, why: str) -> None:
    assert recorded(raw) == why
    got = _recall([raw])
    assert got.skipped == {why: 1}
    assert got.state == ScalerState()
    assert got.since is None


def _at(t: float, group: str = BURSTY, *, exact: bool = True, **changes: Any) -> Recorded:
    signals = make_signals(group=group, collected_at=t - 0.01, **changes)
    return Recorded(t, group, signals, exact=exact)


IDLE: dict[str, Any] = {"arrival_rps": 0.0, "lag": 0}


@pytest.mark.parametrize(
    ("records", "shape"),
    [
        pytest.param(
            [_at(5.0), _at(5.0, STEADY), _at(10.0), _at(10.0, STEADY)],
            [[BURSTY, STEADY], [BURSTY, STEADY]],
            id="two-ticks-of-two-groups",
        ),
        pytest.param(
            [_at(5.0), _at(5.0), _at(5.0, STEADY)],
            [[BURSTY, STEADY]],
            id="a-record-written-twice-counts-once",
        ),
        pytest.param(
            [_at(5.0), _at(7.0, STEADY)],
            [[BURSTY], [STEADY]],
            id="another-tick-s-clock",
        ),
        pytest.param(
            [_at(5.0, exact=False), _at(5.02, STEADY, exact=False), _at(10.0, exact=False)],
            [[BURSTY, STEADY], [BURSTY]],
            id="without-the-clock-by-the-times-written",
        ),
        pytest.param(
            [_at(5.0, exact=False), _at(5.2, exact=False)],
            [[BURSTY], [BURSTY]],
            id="without-the-clock-a-group-twice-opens-the-next-tick",
        ),
        pytest.param(
            [_at(5.0, exact=False), _at(8.0, STEADY, exact=False)],
            [[BURSTY], [STEADY]],
            id="without-the-clock-half-an-interval-after",
        ),
        pytest.param(
            [_at(5.0, **IDLE), _at(5.0, STEADY), _at(10.0, STEADY), _at(25.0, STEADY)],
            [[BURSTY, STEADY], [BURSTY, STEADY], [BURSTY, STEADY]],
            id="an-idle-hold-is-given-again-in-its-place",
        ),
        pytest.param(
            [_at(5.0, **IDLE), _at(5.0, STEADY), _at(40.0, STEADY)],
            [[BURSTY, STEADY], [STEADY]],
            id="not-past-the-longest-idle-cadence",
        ),
        pytest.param(
            [_at(5.0, **IDLE), _at(25.0, **IDLE)],
            [[BURSTY]] * 5,
            id="ticks-where-every-group-held-idle-are-given-back",
        ),
        pytest.param(
            [_at(5.0, **IDLE), _at(5.0, STEADY), _at(25.0, STEADY)],
            [[BURSTY, STEADY], [BURSTY, STEADY]],
            id="no-tick-given-back-where-a-busy-group-wrote-nothing",
        ),
        pytest.param(
            [_at(5.0, **IDLE), _at(100.0, **IDLE)],
            [[BURSTY]] * 8,
            id="a-silence-past-the-idle-cadence-was-the-scaler-away",
        ),
    ],
)
def test_records_are_regrouped_into_the_ticks_that_wrote_them(
    records: list[Recorded], shape: list[list[str]]
) -> None:
    ticks = ticks_of(records, interval_s=5.0, idle_every_s=IDLE_HOLD_EVERY_MAX_S)
    assert [[s.group for s in t.signals] for t in ticks] == shape


def test_an_idle_hold_given_again_is_moved_to_its_tick() -> None:
    first = _at(5.0, **IDLE)
    ticks = ticks_of(
        [first, _at(5.0, STEADY), _at(10.0, STEADY)], interval_s=5.0, idle_every_s=30.0
    )
    again = ticks[1].signals[0]
    assert first.signals is not None
    assert again == dataclasses.replace(first.signals, collected_at=first.signals.collected_at + 5)


def test_the_replay_reaches_past_the_longest_memory_by_half_of_it() -> None:
    config = PolicyConfig()
    assert memory_s(config) == config.burst_memory_s
    assert replay_span_s(config) == 1.5 * config.burst_memory_s
    longer = dataclasses.replace(config, headroom_memory_s=config.burst_memory_s + 60)
    assert memory_s(longer) == config.burst_memory_s + 60
    assert replay_span_s(longer) == 1.5 * (config.burst_memory_s + 60)


def test_a_resumed_memory_tells_a_membership_change_as_its_predecessor_would() -> None:
    """A worker of each group left during the restart: the new process's first collection
    sees one ready replica fewer than the last record, a membership change
    (`last_change_at`), as the old process would have seen it. `to_resume` drops the last
    signals (no decision on them) but keeps the last ready count to compare with."""
    records, live = _live(200, idle_every_s=0.0)
    resumed = to_resume(_recall(records, until=START + 5.0 * 200).state)
    now = START + 5.0 * 201
    signals = []
    for g in live.groups:
        last = g.last_signals
        assert last is not None and last.ready_replicas > 1
        signals.append(
            dataclasses.replace(last, collected_at=now, ready_replicas=last.ready_replicas - 1)
        )
    _, went_on = POLICIES["slo"](signals, live, PolicyConfig(), now)
    _, came_back = POLICIES["slo"](signals, resumed, PolicyConfig(), now)
    assert [g.last_change_at for g in went_on.groups] == [now, now]
    assert [g.last_change_at for g in came_back.groups] == [now, now]


def _newer_than(records: list[Any], t: float) -> list[Any]:
    """The records a log kept after `t` (a retention shorter than the memory)."""
    return [r for r in records if r["tick_at"] > t]


def test_a_checkpoint_gives_back_the_memory_the_records_since_it_cannot() -> None:
    """Only the last 90 ticks' records are left, less than the memory: replayed from
    nothing they lose the bursts before them, started from the newest checkpoint among
    them they give the scaler's memory exactly."""
    records, live = _live(300, idle_every_s=25.0, checkpoints=True)
    left = _newer_than(records, START + 5.0 * 210)
    got = _recall(left, until=START + 5.0 * 300)
    assert got.state == live
    assert got.from_checkpoint is not None
    assert got.from_checkpoint > START + 5.0 * 300 - CHECKPOINT_EVERY_S - 5.0
    assert got.checkpoint_problems == {}
    without = [{**r, "state": None} for r in left]
    replayed = _recall(without, until=START + 5.0 * 300)
    assert replayed.from_checkpoint is None
    assert replayed.state.get(BURSTY).load_samples != live.get(BURSTY).load_samples


def test_a_checkpoint_at_a_tick_a_group_could_not_be_read_is_started_from() -> None:
    """The steady group's collections fail from tick 238 to 245, over the checkpoint due at
    tick 241: its memory is written beside the signals the collector gave again, flagged
    stale, and started from, the scaler's memory exactly."""
    unread = range(238, 246)
    records, live = _live(300, idle_every_s=25.0, checkpoints=True, steady_unread=unread)
    stale = [r for r in records if r["group"] == STEADY and r["signals"]["stale"]]
    assert {r["tick_at"] for r in stale} == {START + 5.0 * k for k in unread}
    due = START + 5.0 * 241
    assert {r["group"] for r in records if r["state"] is not None and r["tick_at"] == due} == {
        BURSTY,
        STEADY,
    }
    got = _recall(_newer_than(records, START + 5.0 * 230), until=START + 5.0 * 300)
    assert got.from_checkpoint == due
    assert got.checkpoint_problems == {}
    assert got.state == live


def test_a_checkpoint_with_a_group_missing_is_passed_over_for_an_older_one() -> None:
    """At the newest checkpoint's tick one group's record carries no memory: that tick is
    incomplete, the one before it is started from, and the memory is still the scaler's."""
    records, live = _live(300, idle_every_s=25.0, checkpoints=True)
    newest = max(r["tick_at"] for r in records if r["state"] is not None)
    left = [
        {**r, "state": None} if r["tick_at"] == newest and r["group"] == STEADY else r
        for r in records
    ]
    got = _recall(left, until=START + 5.0 * 300)
    assert got.from_checkpoint is not None and got.from_checkpoint < newest
    assert got.state == live


def test_a_checkpoint_of_another_version_is_counted_and_replayed_over() -> None:
    records, live = _live(300, idle_every_s=25.0, checkpoints=True)
    other = [
        r if r["state"] is None else {**r, "state": {**r["state"], "fields": {"v2": 1}}}
        for r in records
    ]
    got = _recall(other, until=START + 5.0 * 300)
    assert got.from_checkpoint is None
    assert sum(got.checkpoint_problems.values()) == sum(r["state"] is not None for r in records)
    assert got.checkpoint_problems.keys() == {"a checkpoint not of this version"}
    assert got.state == live  # every record was still replayed, from the first


@pytest.mark.parametrize(
    ("options", "config"),
    [
        pytest.param({"policy_name": "keda-lag"}, PolicyConfig(), id="another-policy"),
        pytest.param({}, PolicyConfig(burst_memory_s=900.0), id="another-configuration"),
    ],
)
def test_a_memory_built_by_another_policy_or_settings_is_not_started_from(
    options: dict[str, Any], config: PolicyConfig
) -> None:
    records, _ = _live(200, idle_every_s=25.0, checkpoints=True)
    kwargs: dict[str, Any] = {
        "since": 0.0,
        "until": START + 5.0 * 200,
        "interval_s": 5.0,
        "idle_every_s": IDLE_HOLD_EVERY_MAX_S,
        "policy_name": "slo",
        **options,
    }
    got = recall(records, POLICIES["slo"], config, **kwargs)
    assert got.from_checkpoint is None
    assert got.checkpoint_problems.keys() == {"a checkpoint of another policy or configuration"}


def test_a_checkpoint_without_the_tick_s_clock_is_not_started_from() -> None:
    records, _ = _live(200, idle_every_s=25.0, checkpoints=True)
    newest = max(r["tick_at"] for r in records if r["state"] is not None)
    clockless = [
        {**r, "tick_at": None, "at": r["tick_at"]} if r["tick_at"] == newest else r for r in records
    ]
    got = _recall(clockless, until=START + 5.0 * 200)
    assert got.checkpoint_problems == {"a checkpoint without 'tick_at'": 2}
    assert got.from_checkpoint is not None and got.from_checkpoint < newest


def test_a_checkpoint_tick_one_group_s_record_is_missing_from_is_passed_over() -> None:
    """One group's record of the newest checkpoint's tick could not be written (the broker
    went away): the other's checkpoint names both groups, so that tick is incomplete."""
    records, _ = _live(300, idle_every_s=25.0, checkpoints=True)
    newest = max(r["tick_at"] for r in records if r["state"] is not None)
    left = [r for r in records if not (r["tick_at"] == newest and r["group"] == STEADY)]
    got = _recall(left, until=START + 5.0 * 300)
    assert got.from_checkpoint is not None and got.from_checkpoint < newest


def test_a_group_with_no_record_since_the_checkpoint_is_kept_for_the_forgetting_time() -> None:
    """The steady group's records stop right after the checkpoint (its collections
    failed): within the forgetting time it is remembered and decided stale, as the
    scaler would, not forgotten at the first tick after the checkpoint."""
    records, _ = _live(300, idle_every_s=0.0, checkpoints=True)
    # A checkpoint where the steady group was busy (an idle one's hold is given again).
    at = max(
        r["tick_at"]
        for r in records
        if r["state"] is not None and r["group"] == STEADY and r["signals"]["arrival_rps"]
    )
    left = [r for r in records if r["tick_at"] <= at or r["group"] != STEADY]
    left = [r for r in left if r["tick_at"] <= at + 10.0]
    got = _recall(left, until=at + 10.0)
    assert got.from_checkpoint == at
    assert STEADY in {g.group for g in got.state.groups}


@pytest.mark.parametrize("cut", [False, True], ids=["ticks-after-it", "the-last-tick"])
def test_a_checkpoint_the_policy_cannot_go_on_from_falls_back_to_the_replay(cut: bool) -> None:
    """Whether ticks follow the checkpoint or it is the last one read (a restart within a
    tick of it), a memory the policy fails on is replayed over."""
    records, live = _live(200, idle_every_s=0.0, checkpoints=True)
    newest = max(r["tick_at"] for r in records if r["state"] is not None)
    until = newest if cut else START + 5.0 * 200
    records = [r for r in records if r["tick_at"] <= until]
    decide = POLICIES["slo"]

    def fails_on_a_checkpoint(
        signals: Any, state: ScalerState, config: PolicyConfig, now: float
    ) -> Any:
        if any(g.hold_factor == 3.5 for g in state.groups):
            raise OverflowError("int too large to convert to float")
        return decide(signals, state, config, now)

    forged = [
        r
        if r["state"] is None
        else {**r, "state": {**r["state"], "fields": {**r["state"]["fields"], "hold_factor": 3.5}}}
        for r in records
    ]
    got = recall(
        forged,
        fails_on_a_checkpoint,
        PolicyConfig(),
        since=0.0,
        until=until,
        interval_s=5.0,
        idle_every_s=IDLE_HOLD_EVERY_MAX_S,
        policy_name="slo",
    )
    assert got.from_checkpoint is None
    assert got.checkpoint_problems == {
        "a checkpoint the policy could not go on from (OverflowError)": 1
    }
    assert got.state == (live if not cut else _recall(records, until=until).state)


def test_signals_survive_the_record_round_trip() -> None:
    records, _ = _live(1, idle_every_s=0.0)
    got = recorded(records[0])
    assert isinstance(got, Recorded)
    assert isinstance(got.signals, GroupSignals)
    assert got.signals.group == BURSTY
    assert got.exact


def test_a_record_whose_acting_is_not_a_boolean_is_counted_as_such() -> None:
    got = _recall([_record(acting="yes")])
    assert got.skipped == {"'acting' not a boolean": 1}
    assert got.state == ScalerState()


@pytest.mark.parametrize(
    ("value", "raw"),
    [
        pytest.param(b'{"group": "g"}', {"group": "g"}, id="json"),
        pytest.param(b"[1]", [1], id="json-not-an-object"),
        pytest.param(b"{nope", Unreadable("not JSON"), id="not-json"),
        pytest.param(b"\xff\xfe", Unreadable("not JSON"), id="not-utf-8"),
        pytest.param(b"[" * 100_000, Unreadable("not JSON"), id="nested-past-the-stack"),
        pytest.param(None, Unreadable("no value (a tombstone)"), id="tombstone"),
    ],
)
def test_what_a_record_s_bytes_decode_to(value: bytes | None, raw: Any) -> None:
    assert decoded(value) == raw


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


async def test_a_read_with_no_broker_gives_up_within_its_time() -> None:
    """Connecting is bounded too: aiokafka would retry for its 40 s request timeout."""
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        await read_decisions("127.0.0.1:1", since=0.0, most=10, timeout_s=0.5)
    assert time.monotonic() - started < 10.0

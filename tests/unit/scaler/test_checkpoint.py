"""A group's memory written beside its decision record, and read back (`scaler/checkpoint.py`)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from scaler.checkpoint import (
    CHECKPOINT_EVERY_S,
    Checkpoint,
    checkpoint_due,
    checkpoint_from_dict,
    checkpoint_to_dict,
    config_digest,
    tick_checkpoints,
)
from scaler.config import PolicyConfig
from scaler.signals import GroupState, ScalerState
from tests.unit.scaler.conftest import make_signals

GROUP = "inferbus.workers.m.interactive"
OTHER = "inferbus.workers.m.batch"
SIGNALS = make_signals(group=GROUP, collected_at=995.0)
DIGEST = config_digest(PolicyConfig())


def _full_state() -> GroupState:
    """A memory with every field away from its default, floats that JSON must keep exact."""
    return GroupState(
        group=GROUP,
        arrival_samples=((980.0, 812.25), (995.0, 0.1 + 0.2)),
        recommendations=((990.0, 5), (995.0, 4)),
        failed_collections=2,
        last_ready_replicas=4,
        last_signals=SIGNALS,
        observed_since=5.0,
        last_scale_down_at=900.5,
        last_step_down_at=901.0,
        load_samples=((980.0, 2.7), (995.0, 1e-9)),
        service_rps_per_replica=301.123456789,
        last_lag=(995.0, 12),
        last_change_at=960.0,
        spare_samples=((700.0, 3.2),),
        pending_downs=((900.5, 4),),
        hold_factor=1.75,
    )


def _through_json(state: GroupState, of_groups: list[str]) -> Any:
    written = checkpoint_to_dict(state, of_groups, policy="slo", config=DIGEST)
    return json.loads(json.dumps(written))


def test_every_field_of_the_memory_survives_the_record() -> None:
    state = _full_state()
    got = checkpoint_from_dict(_through_json(state, [OTHER, GROUP]), group=GROUP, signals=SIGNALS)
    assert got == Checkpoint(state, frozenset({GROUP, OTHER}), "slo", DIGEST)


def test_the_configuration_s_digest_tells_settings_apart() -> None:
    assert config_digest(PolicyConfig()) == DIGEST
    assert config_digest(PolicyConfig(burst_memory_s=900.0)) != DIGEST
    # A settings file's 1800 is the default's 1800.0.
    assert config_digest(PolicyConfig(burst_memory_s=1800)) == DIGEST


def test_every_field_but_the_record_s_own_is_written() -> None:
    """A field added to GroupState must be written (and read) too, or this fails: a
    checkpoint without it would start the memory with its default."""
    raw = checkpoint_to_dict(GroupState(group=GROUP), [GROUP], policy="slo", config=DIGEST)
    written = set(raw["fields"])
    fields = {f.name for f in dataclasses.fields(GroupState)}
    assert written == fields - {"group", "last_signals"}


def _with(**changes: Any) -> dict[str, Any]:
    raw = _through_json(_full_state(), [GROUP])
    raw["fields"].update(changes)
    return raw


def _without(name: str) -> dict[str, Any]:
    raw = _through_json(_full_state(), [GROUP])
    del raw["fields"][name]
    return raw


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        pytest.param([], "not of this version", id="not-an-object"),
        pytest.param({"fields": {}}, "not of this version", id="no-of-groups"),
        pytest.param(_without("hold_factor"), "not of this version", id="a-field-missing"),
        pytest.param(_with(new_field=1), "not of this version", id="a-field-unknown"),
        pytest.param(
            {**_with(), "of_groups": "g"}, "not a list of group names", id="of-groups-a-string"
        ),
        pytest.param({**_with(), "of_groups": [OTHER]}, "lacks its own group", id="not-its-own"),
        pytest.param({**_with(), "policy": None}, "is not a string", id="no-policy-name"),
        pytest.param(_with(hold_factor="2"), "'hold_factor' unreadable", id="a-string-number"),
        pytest.param(_with(observed_since=True), "'observed_since' unreadable", id="a-bool"),
        pytest.param(
            _with(failed_collections=-1), "'failed_collections' unreadable", id="negative-count"
        ),
        pytest.param(
            _with(recommendations=[[1.0, 2.5]]), "'recommendations' unreadable", id="count-float"
        ),
        pytest.param(_with(load_samples=[[1.0]]), "'load_samples' unreadable", id="short-pair"),
        pytest.param(_with(spare_samples={"a": 1}), "'spare_samples' unreadable", id="not-a-list"),
        pytest.param(_with(last_lag=[1.0, 2, 3]), "'last_lag' unreadable", id="lag-of-three"),
        pytest.param(_with(hold_factor=1e400), "'hold_factor' unreadable", id="infinite"),
        pytest.param(_with(hold_factor=0.5), "'hold_factor' unreadable (under 1)", id="factor"),
        pytest.param(
            _with(service_rps_per_replica=0), "'service_rps_per_replica' unreadable", id="mu-0"
        ),
        pytest.param(_with(load_samples=[[1.0, -2.0]]), "unreadable (negative)", id="load-below-0"),
        pytest.param(
            _with(arrival_samples=[[1.0, -0.5]]), "'arrival_samples' unreadable", id="rate-below-0"
        ),
        pytest.param(
            _with(spare_samples=[[1.0, -1.0]]), "'spare_samples' unreadable", id="spare-below-0"
        ),
        pytest.param(
            _with(last_lag=[1.0, 10**400]), "'last_lag' unreadable", id="count-past-a-float"
        ),
    ],
)
def test_a_checkpoint_this_version_cannot_start_from_says_why(raw: Any, why: str) -> None:
    got = checkpoint_from_dict(raw, group=GROUP, signals=SIGNALS)
    assert isinstance(got, str)
    assert why in got


def _state(*groups: GroupState) -> ScalerState:
    return ScalerState(groups=groups)


def test_a_tick_s_checkpoints_are_written_only_where_each_group_s_can_be_started_from() -> None:
    other = make_signals(group=OTHER, tier="batch", collected_at=995.0)
    ours = GroupState(group=GROUP, last_signals=SIGNALS)
    theirs = GroupState(group=OTHER, last_signals=other)
    keys = {"policy": "slo", "config": DIGEST}
    both = tick_checkpoints(_state(ours, theirs), [SIGNALS, other], **keys)
    assert isinstance(both, dict) and set(both) == {GROUP, OTHER}
    assert both[GROUP]["of_groups"] == sorted([GROUP, OTHER])
    assert (both[GROUP]["policy"], both[GROUP]["config"]) == ("slo", DIGEST)
    # A group the memory holds but the tick did not collect (decided on older signals).
    got = tick_checkpoints(_state(ours, theirs), [SIGNALS], **keys)
    assert got == f"not collected at this tick: {OTHER}"
    # A group decided stale on signals it was given: its last signals are older.
    older = GroupState(group=OTHER, last_signals=dataclasses.replace(other, collected_at=900.0))
    got = tick_checkpoints(_state(ours, older), [SIGNALS, other], **keys)
    assert got == f"decided on older signals: {OTHER}"
    # Signals it was given flagged stale, but not the ones it keeps: older too.
    repeat = dataclasses.replace(other, collected_at=900.0, stale=True)
    got = tick_checkpoints(_state(ours, theirs), [SIGNALS, repeat], **keys)
    assert got == f"decided on older signals: {OTHER}"
    # A group the collector could not read, given its last signals again flagged stale:
    # the memory it keeps is the one those repeat, and it is written beside the repeat.
    stale = dataclasses.replace(other, stale=True)
    kept = tick_checkpoints(_state(ours, theirs), [SIGNALS, stale], **keys)
    assert isinstance(kept, dict) and set(kept) == {GROUP, OTHER}
    # Nothing to write: no group collected, none remembered.
    assert tick_checkpoints(_state(), [], **keys) == "no group in the memory"
    # A group recalled and not collected yet only waits: the others are written.
    waiting = GroupState(group=OTHER)
    alone = tick_checkpoints(_state(ours, waiting), [SIGNALS], **keys)
    assert isinstance(alone, dict) and set(alone) == {GROUP}
    assert alone[GROUP]["of_groups"] == [GROUP]
    # A value JSON writes but no reader takes back (NaN) is not written.
    nan = dataclasses.replace(ours, hold_factor=float("nan"))
    got = tick_checkpoints(_state(nan, theirs), [SIGNALS, other], **keys)
    assert isinstance(got, str) and got.startswith(f"{GROUP} would not read back")


@pytest.mark.parametrize(
    ("now", "last_at", "due"),
    [
        (1000.0, None, True),
        (1000.0, 1000.0 - CHECKPOINT_EVERY_S, True),
        (1000.0, 1000.0 - CHECKPOINT_EVERY_S + 5.0, False),
        (1000.0, 1000.0, False),
        (1000.0, 1000.5, True),
    ],
    ids=["never-written", "after-the-interval", "within-it", "at-it", "clock-stepped-back"],
)
def test_when_a_checkpoint_is_due(now: float, last_at: float | None, due: bool) -> None:
    assert checkpoint_due(now, last_at) is due

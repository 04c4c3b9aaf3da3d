"""The registry fold: latest per instance, `gone` removes, time-to-ready measured once."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from scaler.registry import (
    READY_HISTORY,
    RegistryTable,
    decode,
    fold,
    fold_all,
    fold_value,
    groups_with_live_members,
    ready_time,
    replicas_by_state,
    tombstone,
)
from schemas.telemetry import InstanceRecord, InstanceState

T0 = datetime(2026, 1, 1, tzinfo=UTC)
GROUP = "inferbus.workers.m.interactive"


def rec(
    iid: str,
    state: InstanceState,
    at_s: float,
    group: str = GROUP,
    ttr: float | None = None,
    partitions: int | None = None,
) -> InstanceRecord:
    return InstanceRecord(
        instance_id=iid,
        model="m",
        tiers=["interactive"],
        group=group,
        state=state,
        started_at=T0,
        updated_at=T0 + timedelta(seconds=at_s),
        time_to_ready_s=ttr,
        partitions=partitions,
    )


@pytest.mark.parametrize(
    ("records", "states", "ready_times"),
    [
        pytest.param([], {}, (), id="empty"),
        pytest.param(
            [rec("a", "loading", 1), rec("a", "warming", 2), rec("a", "ready", 5)],
            {"ready": 1},
            (5.0,),
            id="lifecycle-latest-wins-ttr-from-timestamps",
        ),
        pytest.param(
            [rec("a", "ready", 5, ttr=4.5), rec("a", "ready", 9, ttr=4.5)],
            {"ready": 1},
            (4.5,),
            id="ttr-field-preferred-and-counted-once",
        ),
        pytest.param(
            [rec("a", "ready", 5), rec("a", "draining", 8), rec("a", "gone", 9)],
            {},
            (5.0,),
            id="gone-removes-keeps-measurement",
        ),
        pytest.param(
            [rec("a", "draining", 8), rec("a", "ready", 5)],
            {"draining": 1},
            (),
            id="older-update-out-of-order-ignored",
        ),
        pytest.param(
            [rec("a", "ready", 3), rec("b", "loading", 1), rec("c", "ready", 2, group="other")],
            {"ready": 1, "loading": 1},
            (3.0,),
            id="counts-only-own-group",
        ),
        pytest.param(
            [rec("a", "ready", 3, partitions=0), rec("b", "ready", 3, partitions=6)],
            {"warming": 1, "ready": 1},
            (3.0, 3.0),
            id="ready-without-partitions-is-still-joining",
        ),
        pytest.param(
            [rec("a", "ready", 3, partitions=0), rec("a", "ready", 9, partitions=12)],
            {"ready": 1},
            (3.0,),
            id="joined-once-partitions-arrive",
        ),
    ],
)
def test_fold(
    records: list[InstanceRecord], states: dict[str, int], ready_times: tuple[float, ...]
) -> None:
    table = fold_all(records)
    counts = {k: v for k, v in replicas_by_state(table, GROUP).items() if v}
    assert counts == states
    assert table.time_to_ready_s.get(GROUP, ()) == ready_times


def test_ready_time_summary_and_history_bound() -> None:
    table = RegistryTable()
    assert ready_time(table, GROUP) is None
    for i in range(READY_HISTORY + 5):
        table = fold(table, rec(f"i{i}", "ready", 1 + i))
    summary = ready_time(table, GROUP)
    assert summary is not None
    assert summary.samples == READY_HISTORY
    assert summary.max_s == READY_HISTORY + 5


def test_tombstone_and_decode() -> None:
    table = fold_all([rec("a", "ready", 1)])
    assert tombstone(table, "a").instances == {}
    assert tombstone(table, "zzz") is table
    assert decode(None) is None
    assert decode(rec("a", "ready", 1).model_dump_json().encode()) == rec("a", "ready", 1)


def test_standbys_are_counted_apart_from_consumers() -> None:
    from datetime import UTC, datetime

    from scaler.registry import fold_all, replicas_by_state, standby_replicas
    from schemas.telemetry import InstanceRecord

    now = datetime.now(UTC)
    group = "inferbus.workers.m.interactive"

    def rec(instance: str, *, standby: bool, partitions: int) -> InstanceRecord:
        return InstanceRecord(
            instance_id=instance,
            model="m",
            tiers=["interactive"],
            group=group,
            state="ready",
            started_at=now,
            updated_at=now,
            lease_s=6.0,
            partitions=partitions,
            standby=standby,
        )

    table = fold_all([rec("a", standby=False, partitions=12), rec("b", standby=True, partitions=0)])
    assert replicas_by_state(table, group, now)["ready"] == 1
    assert replicas_by_state(table, group, now)["warming"] == 0
    assert standby_replicas(table, group, now) == 1


@pytest.mark.parametrize(
    ("lease_s", "kept"),
    [
        # Killed without a `gone`, every 120 s a new one: those 100 leases (600 s) older than
        # the newest record go; a5 (600 s old) to a10 and the live refresher stay.
        pytest.param(6.0, {f"a{i}" for i in range(5, 11)} | {"live"}, id="leased-forgotten"),
        pytest.param(None, {f"a{i}" for i in range(11)} | {"live"}, id="no-lease-kept"),
    ],
)
def test_instances_long_past_their_lease_are_forgotten(
    lease_s: float | None, kept: set[str]
) -> None:
    records = []
    for i in range(11):
        at_s = 120.0 * i
        records.append(rec(f"a{i}", "ready", at_s).model_copy(update={"lease_s": lease_s}))
        records.append(rec("live", "ready", at_s).model_copy(update={"lease_s": lease_s}))
    table = fold_all(records)
    assert set(table.instances) == kept


def test_fold_value_folds_a_record_forgets_on_a_tombstone_and_refuses_garbage() -> None:
    value = rec("w1", "ready", 0).model_dump_json().encode()
    table = fold_value(RegistryTable(), b"w1", value)
    assert set(table.instances) == {"w1"}
    assert fold_value(table, b"w1", None).instances == {}
    assert fold_value(table, None, None) is table
    with pytest.raises(ValidationError):
        fold_value(table, b"x", b'{"not": "an instance"}')


def test_groups_with_live_members_names_every_group_a_live_instance_serves() -> None:
    other = "inferbus.workers.m.batch"
    expired = rec("w3", "ready", 0.0, group="inferbus.workers.old.interactive")
    table = fold_all(
        [
            rec("w1", "ready", 100.0).model_copy(update={"groups": [GROUP, other]}),
            rec("w2", "gone", 100.0, group="inferbus.workers.gone.interactive"),
            expired.model_copy(update={"lease_s": 6.0}),
        ]
    )
    assert groups_with_live_members(table, T0 + timedelta(seconds=101)) == {GROUP, other}

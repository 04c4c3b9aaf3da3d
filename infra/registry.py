"""The instance registry as a pure fold of `inferbus.instances` records, and who is alive.

Workers and ingest instances publish their record on every state change and refresh it
within its lease; the scaler and every member fold the same records the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime

from schemas.telemetry import InstanceRecord

READY_HISTORY = 32
"""Time-to-ready measurements kept per group (newest last)."""

FORGET_AFTER_LEASES = 100
"""An instance whose record is this many leases older than the newest record folded is
forgotten: a process killed without its `gone` (OOM, eviction) would otherwise stay in every
member's table for the life of the topic. Records carry their writers' clocks, so the
margin is wide (10 minutes at a 6 s lease): a host whose clock runs ahead by less cannot
make live instances look gone."""


@dataclass(frozen=True)
class RegistryTable:
    """Current registry: the latest record per live instance, and measured time-to-ready."""

    instances: Mapping[str, InstanceRecord] = field(default_factory=dict)
    time_to_ready_s: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    """Per group: seconds from process start to ready, one per instance that became ready."""


def _time_to_ready(record: InstanceRecord) -> float | None:
    if record.time_to_ready_s is not None:
        return record.time_to_ready_s
    elapsed = (record.updated_at - record.started_at).total_seconds()
    return elapsed if elapsed >= 0 else None


def fold(table: RegistryTable, record: InstanceRecord) -> RegistryTable:
    """Apply one record: latest per instance id wins, `gone` removes, ready records a time."""
    previous = table.instances.get(record.instance_id)
    if previous is not None and record.updated_at < previous.updated_at:
        return table  # An older update replayed out of order: the table already knows better.
    instances = {
        key: kept
        for key, kept in table.instances.items()
        if not _long_gone(kept, record.updated_at)
    }
    if record.state == "gone":
        instances.pop(record.instance_id, None)
    else:
        instances[record.instance_id] = record
    ready_times = table.time_to_ready_s
    became_ready = record.state == "ready" and (previous is None or previous.state != "ready")
    measured = _time_to_ready(record) if became_ready else None
    if measured is not None:
        history = (*table.time_to_ready_s.get(record.group, ()), measured)[-READY_HISTORY:]
        ready_times = {**table.time_to_ready_s, record.group: history}
    return replace(table, instances=instances, time_to_ready_s=ready_times)


def _long_gone(record: InstanceRecord, now: datetime) -> bool:
    if record.lease_s is None:
        return False
    return (now - record.updated_at).total_seconds() > FORGET_AFTER_LEASES * record.lease_s


def fold_all(
    records: Iterable[InstanceRecord], table: RegistryTable | None = None
) -> RegistryTable:
    """Fold records in order, from an empty table unless one is given."""
    current = table or RegistryTable()
    for record in records:
        current = fold(current, record)
    return current


def tombstone(table: RegistryTable, instance_id: str) -> RegistryTable:
    """A compaction tombstone (null value) for an instance removes it like `gone`."""
    if instance_id not in table.instances:
        return table
    instances = {k: v for k, v in table.instances.items() if k != instance_id}
    return replace(table, instances=instances)


def fold_value(table: RegistryTable, key: bytes | None, value: bytes | None) -> RegistryTable:
    """One record of the registry topic as read: a tombstone forgets its instance, an
    instance record is folded. Raises ValidationError for a value that is no instance
    record (the caller says so and reads on)."""
    record = decode(value)
    if record is None:
        return tombstone(table, key.decode(errors="replace")) if key is not None else table
    return fold(table, record)


def decode(value: bytes | None) -> InstanceRecord | None:
    """Parse one record's value; None for a tombstone. Raises ValidationError when invalid."""
    if value is None:
        return None
    return InstanceRecord.model_validate_json(value)


def is_live(record: InstanceRecord, now: datetime) -> bool:
    """Not gone, and refreshed within its lease (records without a lease never expire)."""
    if record.state == "gone":
        return False
    if record.lease_s is None:
        return True
    return (now - record.updated_at).total_seconds() <= record.lease_s


def live_instances(table: RegistryTable, now: datetime) -> dict[str, InstanceRecord]:
    """The instances whose process is alive by its lease."""
    return {key: record for key, record in table.instances.items() if is_live(record, now)}

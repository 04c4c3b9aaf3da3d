"""Pure load arithmetic: per-replica throughput at the achieved batch size, from heartbeats."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from schemas.telemetry import Heartbeat
from schemas.topics import worker_group


@dataclass(frozen=True)
class GroupLoad:
    """What a group's workers reported over their last heartbeat each."""

    reporting: int
    """Workers with a fresh heartbeat that carries load."""
    utilization: float | None
    """Mean busy share of the reporting workers, 0..1."""
    service_rps_per_replica: float | None
    """Samples one worker completes per busy second (samples / busy seconds, summed)."""
    achieved_batch_size: float | None
    """Samples per batch over all reporting workers."""
    samples_per_s: float
    """Samples per second the reporting workers completed, together."""


def heartbeat_group(heartbeat: Heartbeat) -> str | None:
    """The worker group a heartbeat counts for: its model's first (highest) tier, in its lane."""
    if heartbeat.model is None or not heartbeat.tiers:
        return None
    return worker_group(heartbeat.model, heartbeat.tiers[0], heartbeat.lane or "stable")


def latest(book: Mapping[str, Heartbeat], heartbeat: Heartbeat) -> dict[str, Heartbeat]:
    """Keep the newest heartbeat per instance."""
    previous = book.get(heartbeat.instance_id)
    if previous is not None and previous.at > heartbeat.at:
        return dict(book)
    return {**book, heartbeat.instance_id: heartbeat}


def group_load(
    heartbeats: Iterable[Heartbeat], group: str, now: datetime, max_age_s: float
) -> GroupLoad:
    """Fold the fresh heartbeats of one group into its load."""
    fresh = [
        (hb, hb.load)
        for hb in heartbeats
        if hb.load is not None
        and heartbeat_group(hb) == group
        and (now - hb.at).total_seconds() <= max_age_s
    ]
    if not fresh:
        return GroupLoad(0, None, None, None, 0.0)
    busy_s = samples = batches = wall_rps = 0.0
    for hb, load in fresh:
        # The load's own window: a stopping worker's last heartbeat covers less than the
        # interval, and scaling its busy share by the full interval read capacity low
        # (live: 14/s for a 50/s engine right after a scale-down).
        window = load.window_s if load.window_s else hb.interval_s
        busy_s += min(1.0, load.busy_fraction) * window
        # The count over the interval when the worker sends it: the worker's samples_per_s
        # is per *busy* second (samples / busy_s), so times the interval it overstated the
        # work by 1/busy_fraction (live: 178/s per replica for a 55/s engine at 30% busy).
        done = float(load.samples) if load.samples > 0 else load.samples_per_s * window
        samples += done
        wall_rps += done / window
        if load.mean_batch_size > 0:
            batches += done / load.mean_batch_size
    return GroupLoad(
        reporting=len(fresh),
        utilization=sum(min(1.0, load.busy_fraction) for _, load in fresh) / len(fresh),
        service_rps_per_replica=samples / busy_s if busy_s > 0 and samples > 0 else None,
        achieved_batch_size=samples / batches if batches > 0 else None,
        samples_per_s=wall_rps,
    )

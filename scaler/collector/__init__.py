"""The scaler's collector: all of its measurement I/O, with the arithmetic in pure modules."""

from scaler.collector.collector import (
    CollectionError,
    Collector,
    CollectorConfig,
    GroupCollection,
    GroupTarget,
    StageLatencies,
    StageP99,
    targets_for,
)
from scaler.collector.feeds import TelemetryFeed
from scaler.collector.lag import LagBranch, PartitionLag, PartitionOffsets
from scaler.collector.latency import WindowLatencies, stage_p99s
from scaler.collector.offsets import GroupOffsetReader

__all__ = [
    "CollectionError",
    "Collector",
    "CollectorConfig",
    "GroupCollection",
    "GroupOffsetReader",
    "GroupTarget",
    "LagBranch",
    "PartitionLag",
    "PartitionOffsets",
    "StageLatencies",
    "StageP99",
    "TelemetryFeed",
    "WindowLatencies",
    "stage_p99s",
    "targets_for",
]

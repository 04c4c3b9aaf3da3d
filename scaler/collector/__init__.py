"""The scaler's collector: all of its measurement I/O, with the arithmetic in pure modules."""

from scaler.collector.collector import (
    CollectionError,
    Collector,
    CollectorConfig,
    GroupCollection,
    GroupTarget,
    StageLatencies,
    StageP99,
)
from scaler.collector.feeds import TelemetryFeed
from scaler.collector.lag import LagBranch, PartitionLag, PartitionOffsets
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
]

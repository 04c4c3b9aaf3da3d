"""Stage p99s for the policy, from the merged telemetry windows of `scaler.telemetry`."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from scaler.collector.collector import StageP99
from scaler.telemetry import StageStats, StageWindows
from schemas.topics import Lane, Tier
from tracing.attributes import SUMMED_STAGES, SummedStage

StatsFor = Callable[[str], StageStats | None]


def summed_p99(stats_for: StatsFor, stages: Sequence[str]) -> float | None:
    """Sum of the stages' p99s: an upper bound of the p99 of their sum. None when no stage
    was measured."""
    found = [s.p99_ms for s in (stats_for(stage) for stage in stages) if s is not None]
    return sum(found) if found else None


def joint_p99(stats_for: StatsFor, summed: SummedStage) -> float | None:
    """The p99 of a per-request sum of stages (`SUMMED_STAGES`) as the workers record it;
    where none did (a worker from before they did), the sum of its stages' p99s."""
    joint = stats_for(summed)
    if joint is not None:
        return joint.p99_ms
    return summed_p99(stats_for, SUMMED_STAGES[summed])


def stage_p99s(stats_for: StatsFor) -> StageP99:
    """Queue (queue + batch wait), engine (pre + infer + post) and e2e p99, in ms."""
    e2e = stats_for("e2e")
    return StageP99(
        queue_ms=joint_p99(stats_for, "wait"),
        engine_ms=joint_p99(stats_for, "engine"),
        e2e_ms=e2e.p99_ms if e2e is not None else None,
    )


class WindowLatencies:
    """`StageLatencies` over `StageWindows` (fed by the telemetry feed's heartbeats); a lane
    without windows of its own reads the stable ones."""

    def __init__(
        self, windows: StageWindows, lanes: Mapping[Lane, StageWindows] | None = None
    ) -> None:
        self._windows = windows
        self._lanes = dict(lanes or {})

    def p99s(self, model: str, tier: Tier, lane: Lane = "stable") -> StageP99:
        windows = self._lanes.get(lane, self._windows)
        return stage_p99s(lambda stage: windows.stats(model, tier, stage))

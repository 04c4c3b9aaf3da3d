"""What `inferbus bench scale-step` runs: its options and the load step's schedule (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

PHASES = ("before", "step", "kill", "after")


@dataclass(frozen=True)
class Phase:
    """One stretch of constant offered load."""

    name: str
    rate_rps: float
    duration_s: float


@dataclass(frozen=True)
class ScaleStepOptions:
    """What to run; the defaults are the recorded benchmark."""

    model: str = "sim-encoder"
    seq_len: int = 32
    a_ms: float = 4.0
    """Sim engine: fixed cost of one batch."""
    b_ms: float = 16.0
    """Sim engine: cost per sample (one replica: 50 req/s at batch 1, 56 at batch 2)."""
    max_batch_size: int = 2
    slo_p99_ms: float = 1000.0
    min_replicas: int = 1
    max_replicas: int = 8
    low_rps: float = 25.0
    high_rps: float = 175.0
    before_s: float = 30.0
    step_s: float = 90.0
    after_s: float = 60.0
    interval_s: float = 2.0
    """Scaler collection (and decision) interval."""
    scale_down_window_s: float = 30.0
    """HPA-style scale-down stabilisation window, shortened to fit the run."""
    drain_lag: int = 25
    """Lag at or below this counts as drained (near zero)."""
    answer_timeout_s: float = 60.0
    """After the last send, wait this long for the remaining answers."""
    kill_s: float = 30.0
    """Seconds more at the step rate after the step, in which one worker is SIGKILLed
    (0: no kill phase)."""
    kill_at_s: float = 5.0
    """When, into the kill phase, the worker holding the most partitions is killed."""
    bootstrap: str | None = None
    keep_logs: bool = False
    sim_dir: str | None = None
    """Write the arrivals, model.yaml and policy JSON that `inferbus sim` replays here."""

    def schedule(self) -> list[Phase]:
        return step_schedule(
            self.low_rps, self.high_rps, self.before_s, self.step_s, self.after_s, self.kill_s
        )

    def capacity_rps(self, batch: int) -> float:
        """Requests/s one replica serves when every batch holds `batch` (engine time only)."""
        return 1000.0 * batch / (self.a_ms + self.b_ms * batch)


def step_schedule(  # noqa: PLR0917 - the schedule's six numbers, in order
    low_rps: float,
    high_rps: float,
    before_s: float,
    step_s: float,
    after_s: float,
    kill_s: float = 0.0,
) -> list[Phase]:
    """Low, high, low: the load step; with `kill_s`, the high rate goes on that long as the
    `kill` phase (a worker is killed in it) before the low rate comes back."""
    if min(low_rps, high_rps) <= 0 or min(before_s, step_s, after_s) <= 0 or kill_s < 0:
        raise ValueError("rates and durations must be > 0 (kill_s >= 0)")
    kill = [Phase("kill", high_rps, kill_s)] if kill_s > 0 else []
    return [
        Phase("before", low_rps, before_s),
        Phase("step", high_rps, step_s),
        *kill,
        Phase("after", low_rps, after_s),
    ]


def phase_bounds(phases: Sequence[Phase]) -> list[tuple[str, float, float]]:
    """(name, start s, end s) of each phase, from the schedule's start."""
    out, t = [], 0.0
    for phase in phases:
        out.append((phase.name, t, t + phase.duration_s))
        t += phase.duration_s
    return out


def send_times(phases: Sequence[Phase]) -> list[float]:
    """Evenly paced send offsets (s from the schedule's start), phase after phase."""
    times: list[float] = []
    for phase, (_, start, _end) in zip(phases, phase_bounds(phases), strict=True):
        count = round(phase.rate_rps * phase.duration_s)
        times.extend(start + i / phase.rate_rps for i in range(count))
    return times


def phase_at(phases: Sequence[Phase], t: float) -> str:
    """The phase a time belongs to: `warmup` before 0, `drain` after the last one."""
    if t < 0:
        return "warmup"
    for name, start, end in phase_bounds(phases):
        if start <= t < end:
            return name
    return "drain"


def offered_at(phases: Sequence[Phase], t: float) -> float:
    """Offered load (req/s) at time t."""
    for phase, (_, start, end) in zip(phases, phase_bounds(phases), strict=True):
        if start <= t < end:
            return phase.rate_rps
    return 0.0

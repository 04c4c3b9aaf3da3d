"""Settings of one simulation: the service-time model, batching, replica life cycle, SLOs."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args

import yaml
from pydantic import ValidationError

from infra.models.config import BatchingConfig, SimConfig
from infra.yaml_unique import safe_load_unique
from scaler.sim.workload import WorkloadError
from schemas.errors import describe_validation_error
from schemas.topics import Tier

MAX_TICKS = 200_000
"""The most policy ticks (or oracle steps) one run takes: 11 days at the default 5 s."""
MAX_PARTITIONS = 100_000
"""The most partitions a simulated topic may have: each membership change assigns them all
(100,000 simulate in seconds; 10^8 took gigabytes)."""


MAX_BATCH_MS = 60_000.0
"""The most a batch's fixed or per-unit time may be, ms."""


def _must_reach(least: float, **values: float) -> list[str]:
    """'name must be >= least, got v' for each value under `least`."""
    return [f"{k} must be >= {least}, got {v}" for k, v in values.items() if v < least]


def _must_exceed(bound: float, **values: float) -> list[str]:
    """'name must be > bound, got v' for each value at or under `bound`."""
    return [f"{k} must be > {bound}, got {v}" for k, v in values.items() if v <= bound]


def not_finite(**values: float) -> list[str]:
    """`name must be finite, got nan` for each value that is NaN or infinite (NaN passes
    every `<` check below)."""
    return [
        f"{name} must be finite, got {value}"
        for name, value in values.items()
        if not math.isfinite(value)
    ]


@dataclass(frozen=True)
class ServiceModel:
    """Batch service time = a + b·Σunits, units being tokens or samples (the `sim` engine's law)."""

    a_ms: float = 8.0
    b_ms: float = 0.1
    per: Literal["token", "sample"] = "token"
    max_batch_size: int = 4
    max_queue_delay_ms: float = 5.0

    def __post_init__(self) -> None:
        infinite = not_finite(
            a_ms=self.a_ms, b_ms=self.b_ms, max_queue_delay_ms=self.max_queue_delay_ms
        )
        if infinite:
            raise WorkloadError(f"service model: {'; '.join(infinite)}")
        problems = [
            *_must_reach(0, a_ms=self.a_ms, b_ms=self.b_ms),
            *_must_reach(0, max_queue_delay_ms=self.max_queue_delay_ms),
            *_must_reach(1, max_batch_size=self.max_batch_size),
            # A batch over a minute is a typo in ms, and prints 300-digit latencies.
            *[
                f"{k} must be at most {MAX_BATCH_MS:g} ms, got {v:g}"
                for k, v in (("a_ms", self.a_ms), ("b_ms", self.b_ms))
                if v > MAX_BATCH_MS
            ],
        ]
        if problems:
            raise WorkloadError(f"service model: {'; '.join(problems)}")


def read_service_model(path: Path) -> ServiceModel:
    """The `engine.sim` and `batching` blocks of a model.yaml, validated by the model schema."""
    try:
        raw = safe_load_unique(path.read_text())
    except OSError as exc:
        raise WorkloadError(f"cannot read {path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise WorkloadError(f"cannot read {path}: {exc}") from exc
    if not isinstance(raw, dict):
        raise WorkloadError(f"{path} must hold a mapping")
    engine = raw.get("engine") or {}
    if not isinstance(engine, dict):
        raise WorkloadError(
            f"{path}: 'engine' must be a mapping (with a 'sim' block), got {engine!r}"
        )
    if not engine.get("sim"):
        # SimConfig's own defaults are a placeholder, not this model's cost: a run on them
        # looked like a simulation of the model.
        raise WorkloadError(
            f"{path} has no engine.sim block (the model's batch cost a_ms + b_ms per unit): "
            f"run `inferbus models calibrate {raw.get('name', 'MODEL')}` or give --a-ms, --b-ms "
            "and --per instead of --model-yaml"
        )
    try:
        sim = SimConfig.model_validate(engine["sim"])
        batching = BatchingConfig.model_validate(raw.get("batching") or {})
    except ValidationError as exc:
        raise WorkloadError(f"{path}: {describe_validation_error(exc)}", path=str(path)) from exc
    return ServiceModel(
        a_ms=sim.a_ms,
        b_ms=sim.b_ms,
        per=sim.per,
        max_batch_size=batching.max_batch_size,
        max_queue_delay_ms=batching.max_queue_delay_ms,
    )


PauseModel = Literal["incremental", "eager"]
"""How a membership change pauses a group: moved partitions only, or every consumer."""


QueueModel = Literal["partition", "shared"]
"""Who serves what: each consumer its own partitions (live), or one pooled FIFO (ideal)."""


def _default_slos() -> dict[Tier, float]:
    return {"critical": 200.0, "interactive": 500.0, "batch": 60_000.0}


@dataclass(frozen=True)
class SimParams:
    """Everything about the simulated cluster except the arrivals and the policy."""

    service: ServiceModel = field(default_factory=ServiceModel)
    slo_p99_e2e_ms: Mapping[Tier, float] = field(default_factory=_default_slos)
    time_to_ready_s: float = 30.0
    """Start to warm: load and warm-up (a cold replica then joins with a partition handover)."""
    pause_model: PauseModel = "incremental"
    """`incremental`: a membership change pauses only the partitions that move, for
    `handover_pause_s`; `eager`: every consumer stops for `rebalance_pause_s` (aiokafka's
    eager rebalance, for comparison)."""
    handover_pause_s: float = 0.1
    """incremental: seconds a moved partition is not served while it changes owner. Live
    (`inferbus bench scale-step`, explicit ownership on Tansu, 2 cores) a moved partition
    is acquired by its new owner 0.06 s (median) to 0.3 s (most) after the change starts:
    the old owner lets go of what it has not started, answers what is in the engine,
    commits and says so in the registry; the new owner reads it from the commit."""
    rebalance_pause_s: float = 1.0
    """eager: every consumer of a group stops for this long on every membership change."""
    standby: bool = True
    """The actuator can keep warm standby replicas (loaded, not consuming) when asked."""
    standby_promote_s: float = 1.0
    """A warm standby replica consumes this long after it is asked to (the handover)."""
    partitions: int = 32
    queues: QueueModel = "partition"
    """`partition`: every consumer serves only the partitions it owns under the live
    assignment (`infra.assignment`), so with n consumers on P partitions the members with
    ⌈P/n⌉ carry ⌈P/n⌉/(P/n) of the mean load; `shared`: one FIFO every consumer serves
    (pooled, kept to show what uneven shares cost)."""
    min_replicas: int = 1
    warm_replicas: int = 1
    max_replicas: int | None = None
    initial_replicas: int | None = None
    """Replicas at t=0; None starts every policy at the oracle's first-step count (fair start)."""
    max_total_replicas: int | None = None
    """Cluster GPUs; the simulator never runs more replicas than this, whatever a policy asks."""
    collection_interval_s: float = 5.0
    """The policy runs every this many seconds."""
    metrics_window_s: float = 15.0
    """Window of the p99s, utilization and throughput the policy sees."""
    drain_s: float = 600.0
    """After the last arrival keep serving this long; what is still queued counts as unserved."""
    oracle_step_s: float = 60.0
    """The oracle's schedule granularity."""
    scaler_restart_at_s: float | None = None
    """The scaler restarts here: its first tick at or after this time is a new process's."""
    scaler_restart_gap_s: float = 0.0
    """No scaler runs for this long from `scaler_restart_at_s` (the old process gone, the new
    one starting): nothing is decided, the replicas stay as they are, and the new scaler's
    first tick is the first at or after the gap's end."""
    scaler_recall: bool = True
    """A restarted scaler replays its decision records of the last 45 minutes (its memory
    and a warm-up, `recall.replay_span_s`), as the live one does at start; False: it starts
    with no memory."""
    scaler_restart_keeps_memory: bool = False
    """The reference recall is measured against: the scaler only pauses (for
    `scaler_restart_gap_s`) and goes on with the memory it had, as no new process can."""

    def __post_init__(self) -> None:
        infinite = not_finite(
            time_to_ready_s=self.time_to_ready_s,
            handover_pause_s=self.handover_pause_s,
            rebalance_pause_s=self.rebalance_pause_s,
            standby_promote_s=self.standby_promote_s,
            collection_interval_s=self.collection_interval_s,
            metrics_window_s=self.metrics_window_s,
            drain_s=self.drain_s,
            oracle_step_s=self.oracle_step_s,
            scaler_restart_at_s=self.scaler_restart_at_s or 0.0,
            scaler_restart_gap_s=self.scaler_restart_gap_s,
            **{f"slo_p99_e2e_ms[{t}]": v for t, v in self.slo_p99_e2e_ms.items()},
        )
        if infinite:
            raise WorkloadError("; ".join(infinite))
        unmeetable = {t: v for t, v in self.slo_p99_e2e_ms.items() if v <= 0}
        if unmeetable:
            raise WorkloadError(f"slo_p99_e2e_ms must be > 0, got {unmeetable}")
        if self.pause_model not in get_args(PauseModel):
            raise WorkloadError(f"pause_model must be one of {get_args(PauseModel)}")
        if self.queues not in get_args(QueueModel):
            raise WorkloadError(f"queues must be one of {get_args(QueueModel)}")
        problems = [
            *_must_reach(0, time_to_ready_s=self.time_to_ready_s, drain_s=self.drain_s),
            *_must_reach(0, rebalance_pause_s=self.rebalance_pause_s),
            *_must_reach(0, handover_pause_s=self.handover_pause_s),
            *_must_reach(0, standby_promote_s=self.standby_promote_s),
            *_must_reach(0, min_replicas=self.min_replicas),
            # `sim --min-replicas` sets both: the same value refused once.
            *_must_reach(0, **self._warm_if_its_own()),
            *_must_reach(0, initial_replicas=self.initial_replicas or 0),
            *_must_reach(0, max_total_replicas=self.max_total_replicas or 0),
            *_must_reach(0, scaler_restart_at_s=self.scaler_restart_at_s or 0.0),
            *_must_reach(0, scaler_restart_gap_s=self.scaler_restart_gap_s),
            *_must_reach(1, partitions=self.partitions),
            *_must_exceed(0, collection_interval_s=self.collection_interval_s),
            *_must_exceed(0, metrics_window_s=self.metrics_window_s),
            *_must_exceed(0, oracle_step_s=self.oracle_step_s),
        ]
        if self.partitions > MAX_PARTITIONS:
            problems.append(
                f"partitions must be at most {MAX_PARTITIONS} (each membership change assigns "
                f"every one), got {self.partitions}"
            )
        if problems:
            raise WorkloadError("; ".join(problems))
        floor = max(self.min_replicas, self.warm_replicas)
        if self.max_replicas is not None and self.max_replicas < floor:
            which = (
                f"min_replicas {self.min_replicas}"
                if self.min_replicas >= self.warm_replicas
                else f"warm_replicas {self.warm_replicas}"
            )
            raise WorkloadError(f"max_replicas {self.max_replicas} < {which}")
        if (
            self.max_replicas is not None
            and self.initial_replicas is not None
            and self.initial_replicas > self.max_replicas
        ):
            raise WorkloadError(
                f"initial_replicas {self.initial_replicas} > max_replicas {self.max_replicas}: "
                "no policy may run more"
            )

    def _warm_if_its_own(self) -> dict[str, float]:
        same = self.warm_replicas == self.min_replicas
        return {} if same else {"warm_replicas": self.warm_replicas}

    def check_span(self, duration_s: float) -> None:
        """WorkloadError when `duration_s` of arrivals (plus the drain) take more policy ticks
        or oracle steps than a run should: a trace with one row dated 2099 spans 75 years,
        and simulated them without a word."""
        span = duration_s + self.drain_s
        if self.scaler_restart_at_s is not None and self.scaler_restart_at_s > span:
            raise WorkloadError(
                f"scaler_restart_at_s {self.scaler_restart_at_s:g} is after the run ends "
                f"({span:.0f} s of arrivals and drain): the scaler would never restart"
            )
        if (
            self.scaler_restart_at_s is not None
            and self.scaler_restart_at_s + self.scaler_restart_gap_s > span
        ):
            raise WorkloadError(
                f"scaler_restart_gap_s {self.scaler_restart_gap_s:g} ends after the run "
                f"({span:.0f} s of arrivals and drain): the new scaler would never start"
            )
        if self.collection_interval_s > span:
            raise WorkloadError(
                f"collection_interval_s {self.collection_interval_s:g} is longer than the run "
                f"({span:.0f} s of arrivals and drain): the policy would never act"
            )
        ticks = span / self.collection_interval_s
        steps = span / self.oracle_step_s
        if ticks <= MAX_TICKS and steps <= MAX_TICKS:
            return
        raise WorkloadError(
            f"{duration_s:.0f} s of arrivals and {self.drain_s:.0f} s of drain are "
            f"{max(ticks, steps):.3g} policy ticks (every {self.collection_interval_s:g} s) or "
            f"oracle steps (every {self.oracle_step_s:g} s); the simulator runs at most "
            f"{MAX_TICKS}: are the trace's timestamps right, or is collection_interval_s too small?"
        )

    def with_overrides(self, overrides: Mapping[str, float | str | bool]) -> SimParams:
        """A copy with scenario overrides (`time_to_ready_s`, `max_total_replicas`, ...)."""
        known = {f.name for f in dataclasses.fields(self)}
        unknown = set(overrides) - known
        if unknown:
            raise WorkloadError(f"unknown simulation override(s) {sorted(unknown)}")
        typed = {
            k: (
                v
                if isinstance(getattr(self, k), bool | str)
                else int(v)
                if isinstance(getattr(self, k), int) or k == "max_total_replicas"
                else v
            )
            for k, v in overrides.items()
        }
        return dataclasses.replace(self, **typed)  # type: ignore[arg-type]

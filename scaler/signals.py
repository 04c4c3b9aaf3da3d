"""The scaler's input and memory: what the collector measured, what the policy remembers.

Everything here is a frozen dataclass. The collector fills `GroupSignals`; the
policy is a pure function `(signals, ScalerState, PolicyConfig, now) ->
(Decision, ScalerState)`; the actuator applies `Decision`. `PolicyConfig` is in
`config.py`, `Decision` in `decision.py`, snapshot files in `snapshot.py`; the checks
those two loaders share sit here, beside `SignalsError`, so neither imports the other.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from infra.json_unique import RepeatedKeyError, loads_unique_keys
from schemas.errors import InferbusError
from schemas.topics import TIERS, Tier


class SignalsError(InferbusError):
    """A signals snapshot or a policy config is malformed; the message names the field."""


NOT_FINITE = "must be finite (not NaN, Infinity or beyond a float's ±1.8e308)"
"""What a check says about a number the policy's arithmetic cannot take."""


def shown(value: Any) -> str:
    """`repr(value)` for an error message, cut short (a 400-digit integer is not read)."""
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:40]}… ({len(text)} characters)"


def is_finite(value: float) -> bool:
    """A finite number a float can hold (an int beyond a float's range is not)."""
    try:
        return math.isfinite(value)
    except OverflowError:  # an int with more than ~308 digits
        return False


def is_json_number(value: Any) -> bool:
    """A JSON number as json.loads gives it: an int or a float, not a bool."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def read_json_file(path: Path) -> Any:
    """A user's JSON file, or one SignalsError that says what is wrong with it."""
    try:
        return loads_unique_keys(path.read_text(encoding="utf-8"))
    except RepeatedKeyError as exc:
        raise SignalsError(f"{path}: {exc}") from None
    except OSError as exc:
        raise SignalsError(f"cannot read {path}: {exc.strerror}") from exc
    except UnicodeDecodeError:
        raise SignalsError(f"{path} is not UTF-8 text (JSON expected)") from None
    except json.JSONDecodeError as exc:
        raise SignalsError(f"{path} is not valid JSON: {exc}") from exc


Diagnosis = Literal[
    "capacity_bound",
    "backlog",
    "engine_bound",
    "idle",
    "steady",
    "over_provisioned",
    "stale_signals",
    "fallback",
    "partition_capped",
    "budget_capped",
]
"""Why a group is sized the way it is; one per group decision."""

DIAGNOSES: tuple[str, ...] = get_args(Diagnosis)


@dataclass(frozen=True)
class GroupSignals:
    """One worker group as the collector saw it at `collected_at` (seconds, any epoch).

    Rates are per second, latencies are p99 over the collector's window in ms.
    None means "not measured" (no traffic, no telemetry yet): the policy never
    scales down on a None it needs.
    """

    group: str
    """Consumer-group name, e.g. `inferbus.workers.minilm.interactive`."""
    model: str
    """Model served by the group."""
    tier: Tier
    """Priority tier of the group's topic."""
    replicas: int
    """Workers that exist now in any state (starting, ready, draining)."""
    ready_replicas: int
    """Workers registered `ready` and consuming."""
    partitions: int
    """Partitions of the group's topic: the most consumers that can do work."""
    slo_p99_e2e_ms: float
    """The tier's p99 end-to-end latency objective from model.yaml."""
    collected_at: float
    """When the collector took the snapshot, in seconds on the policy's clock."""
    starting_replicas: int = 0
    """Workers loading or warming up (not yet consuming)."""
    arrival_rps: float | None = None
    """Requests produced to the topic per second (end-offset delta over the window)."""
    service_rps_per_replica: float | None = None
    """Requests one ready replica completes per busy second, at the achieved batch size."""
    achieved_batch_size: float | None = None
    """Mean batch size the workers actually formed over the window."""
    lag: int | None = None
    """Sum over partitions of end offset minus committed offset."""
    oldest_age_ms: float | None = None
    """Age of the oldest request not yet committed."""
    queue_p99_ms: float | None = None
    """p99 of queue wait plus batch wait (what scaling can shrink)."""
    engine_p99_ms: float | None = None
    """p99 of preprocess + infer + postprocess (what scaling cannot shrink)."""
    e2e_p99_ms: float | None = None
    """p99 of end-to-end latency, produce to result."""
    utilization: float | None = None
    """Busy share of the ready replicas' time over the window, 0..1."""
    time_to_ready_s: float | None = None
    """Measured seconds from starting a worker to it consuming (registry)."""
    min_replicas: int = 1
    """model.yaml `replicas.min`."""
    max_replicas: int | None = None
    """model.yaml `replicas.max`; None means only partitions and the budget bound it."""
    warm_replicas: int = 0
    """model.yaml `replicas.warm`: kept even when idle."""
    standby_replicas: int | None = None
    """Warm standby workers (loaded, warming or warm, not consuming), not counted in `replicas`;
    None when the deployment keeps no standby (the policy then asks for none)."""
    standby_ready_replicas: int = 0
    """Standby workers that are warm now: each starts consuming within a partition handover."""
    newest_ready_at: float | None = None
    """When the group's most recently ready consumer became ready (the policy's clock): a
    window since then mixes a membership change the scaler did not order, such as a worker
    that died and was started again."""
    stale: bool = False
    """The collector could not refresh this snapshot; values are the last known ones."""

    def __post_init__(self) -> None:
        if self.tier not in TIERS:
            raise SignalsError(f"tier {self.tier!r} is not one of {TIERS}", group=self.group)
        for name in (
            "replicas",
            "ready_replicas",
            "starting_replicas",
            "min_replicas",
            "standby_ready_replicas",
        ):
            if getattr(self, name) < 0:
                raise SignalsError(f"{name} must be >= 0", group=self.group)
        if self.partitions < 1:
            raise SignalsError("partitions must be >= 1", group=self.group)
        if self.slo_p99_e2e_ms <= 0:
            raise SignalsError("slo_p99_e2e_ms must be > 0", group=self.group)
        if self.ready_replicas > self.replicas:
            raise SignalsError(
                f"ready_replicas {self.ready_replicas} > replicas {self.replicas}",
                group=self.group,
            )
        if self.ready_replicas + self.starting_replicas > self.replicas:
            raise SignalsError(
                f"ready_replicas {self.ready_replicas} + starting_replicas "
                f"{self.starting_replicas} > replicas {self.replicas} (replicas counts both)",
                group=self.group,
            )
        if self.max_replicas is not None and self.max_replicas < self.min_replicas:
            raise SignalsError(
                f"max_replicas {self.max_replicas} < min_replicas {self.min_replicas}",
                group=self.group,
            )
        if self.max_replicas is not None and self.warm_replicas > self.max_replicas:
            raise SignalsError(
                f"warm_replicas {self.warm_replicas} > max_replicas {self.max_replicas}",
                group=self.group,
            )
        if self.standby_replicas is not None and self.standby_replicas < 0:
            raise SignalsError("standby_replicas must be >= 0", group=self.group)
        if self.standby_ready_replicas > (self.standby_replicas or 0):
            raise SignalsError(
                f"standby_ready_replicas {self.standby_ready_replicas} > standby_replicas "
                f"{self.standby_replicas}",
                group=self.group,
            )
        if self.utilization is not None and not 0 <= self.utilization <= 1.0 + 1e-9:
            raise SignalsError(f"utilization {self.utilization} is outside 0..1", group=self.group)


@dataclass(frozen=True)
class GroupState:
    """What the policy remembers about one group between ticks."""

    group: str
    arrival_samples: tuple[tuple[float, float], ...] = ()
    """Recent (time s, arrival rps) samples for the forecast, oldest first."""
    recommendations: tuple[tuple[float, int], ...] = ()
    """Recent (time s, desired before stabilization) for the scale-down window."""
    failed_collections: int = 0
    """Consecutive ticks with stale or missing signals."""
    last_ready_replicas: int | None = None
    """Ready replicas at the last good collection: a change is a membership change
    (`last_change_at`). A restart's recall keeps it, unlike `last_signals`."""
    last_signals: GroupSignals | None = None
    """The last good snapshot, to carry a missing group's identity and bounds."""
    observed_since: float | None = None
    """First good collection; no scale-down before a full window of history exists."""
    last_scale_down_at: float | None = None
    """When the SLO policy last scaled this group down."""
    last_step_down_at: float | None = None
    """slo: when arrivals last stepped down (a gap may have begun: scale down slowly)."""
    load_samples: tuple[tuple[float, float], ...] = ()
    """Recent (time s, offered load in busy replicas = arrival / per-replica throughput),
    oldest first, over `burst_memory_s`: the burst memory."""
    service_rps_per_replica: float | None = None
    """The last measured per-replica throughput (kept through idle gaps, when none is measured)."""
    last_lag: tuple[float, int] | None = None
    """(collected_at s, lag) of the last good collection, for the lag's growth rate."""
    last_change_at: float | None = None
    """When consumers last joined or left (a metrics window since then is mixed)."""
    spare_samples: tuple[tuple[float, float], ...] = ()
    """slo: (time s, spare replicas that would have put a clean window's queue p99 at its
    budget), oldest first, over `headroom_memory_s`."""
    pending_downs: tuple[tuple[float, int], ...] = ()
    """slo: (time s, replicas scaled down to) of scale-downs not yet judged (`regret.py`)."""
    hold_factor: float = 1.0
    """slo: the scale-down hold is this many times `hold_s` (`regret.py`)."""


@dataclass(frozen=True)
class ScalerState:
    """Per-group policy memory, immutable: `decide` returns a new one."""

    groups: tuple[GroupState, ...] = ()

    def get(self, group: str) -> GroupState:
        """The group's state, or an empty one for a group not seen before."""
        return next((g for g in self.groups if g.group == group), GroupState(group=group))

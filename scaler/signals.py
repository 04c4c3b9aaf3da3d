"""The scaler's data: what the collector measured, what the policy remembers, what it decided.

Everything here is a frozen dataclass. The collector fills `GroupSignals`; the
policy is a pure function `(signals, ScalerState, PolicyConfig, now) ->
(Decision, ScalerState)`; the actuator applies `Decision`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

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
    last_replicas: int | None = None
    """Replicas at the last good collection (used when the group goes missing)."""
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


@dataclass(frozen=True)
class PolicyConfig:
    """Knobs of the policies; every field carries its unit."""

    target_utilization: float = 0.7
    """Busy share each replica should run at after scaling."""
    utilization_band: float = 0.1
    """No change while projected utilization is within target ± band (hysteresis)."""
    scale_down_window_s: float = 300.0
    """Scale down only to the highest recommendation over this window (HPA default)."""
    forecast_horizon_s: float | None = None
    """How far ahead to forecast arrivals; None uses each group's measured time-to-ready."""
    default_time_to_ready_s: float = 30.0
    """Time-to-ready assumed when a group has not measured one yet."""
    forecast_window_s: float = 60.0
    """The arrival trend is fitted over this long (older samples are dropped)."""
    forecast_min_t: float = 3.0
    """A trend counts only when its slope is this many standard errors from zero."""
    rate_step_z: float = 3.0
    """A new arrival sample this many scatters off the line through the earlier ones is a
    step: the policy sizes for it at once instead of for the average."""
    engine_bound_queue_share: float = 0.2
    """Breach is engine-bound when queue p99 is at most this share of e2e p99."""
    max_total_replicas: int | None = None
    """Global replica budget over all groups; None means unbounded."""
    stale_after_s: float = 30.0
    """Signals older than this (now - collected_at) count as a failed collection."""
    failed_collections_before_fallback: int = 3
    """Consecutive failed collections after which a group goes to `fallback_replicas`."""
    fallback_replicas: int = 1
    """Floor a blind group is raised to (never lowered: KEDA's currentReplicasIfHigher)."""
    hpa_tolerance: float = 0.1
    """Baselines: ignore metric ratios within 1 ± tolerance (HPA default 10%)."""
    keda_lag_threshold: float = 50.0
    """keda-lag: target average lag per replica (KEDA `lagThreshold`)."""
    keda_activation_lag_threshold: float = 0.0
    """keda-lag: at or below this total lag the scaler is inactive (scale to min)."""
    scale_up_min_step_share: float = 0.0
    """slo: a scale-up adds at least this share of current replicas (min 1); 0 = exactly what
    is needed (membership changes only pause the partitions that move)."""
    busiest_max_utilization: float | None = 0.8
    """slo: add consumers until the busiest member (the one with the most partitions) runs
    at most this busy at the measured arrivals (`policy/shares.py`; 0.8, the default sizing
    ceiling `target_utilization + utilization_band`, a fixed number that does not follow
    them); None: size for the mean only."""
    scale_down_min_step_share: float = 0.0
    """slo: skip a scale-down smaller than this share of current (min 1 replica)."""
    scale_down_hold_s: float | None = None
    """slo: scale down only to the highest recommendation over this long (its own window,
    instead of `scale_down_window_s`, which the baselines keep). None: the time-to-ready."""
    scale_down_gap_hold_s: float | None = None
    """slo: after arrivals step down, scale down only to the highest recommendation over
    this long (a gap may end in a burst). None: 2 x (time-to-ready + handover)."""
    regret_window_s: float = 60.0
    """slo: a scale-down followed by a scale-up above its level within this long is a
    regret (`regret.py`); one that stands this long is not."""
    regret_hold_growth: float = 1.0
    """slo: each regret multiplies the scale-down hold by this (1 = the hold never learns)."""
    regret_hold_decay: float = 1.0
    """slo: each scale-down that stood divides the hold's factor by this, down to 1."""
    max_regret_hold_factor: float = 4.0
    """slo: the learned hold is at most this many times `hold_s`."""
    rebalance_settle_s: float = 15.0
    """After a scale-down, the group's lag and queue p99 include the handover pause: for
    this many seconds a lag up to arrival × this long adds no replicas (0 = off)."""
    rebalance_pause_s: float = 1.0
    """Seconds a membership change stops the partitions it moves (the live handover)."""
    backlog_drain_s: float = 10.0
    """slo: drain the backlog projected at the new replicas' ready time within this long."""
    metrics_window_s: float = 15.0
    """Window of the collector's rates, p99s and utilization; a window that saw a membership
    change is not used to learn the safe utilization."""
    initial_spare_replicas: float = 4.0
    """slo: replicas kept beyond the busy ones before clean windows have taught better."""
    min_spare_replicas: float = 0.5
    """slo: the learned spare never goes below this."""
    max_spare_replicas: float = 16.0
    """slo: the learned spare never goes above this."""
    light_load_spare_beta: float = 4.0
    """slo: until its spare is learned, a group keeps at most this × √(busy replicas) of the
    initial spare (square-root staffing): a trickle needs none. At the default the initial
    guess of 4 holds from one busy replica up; a learned spare is not capped. 4 and 13
    changed none of 96 simulator cells (docs/benchmarks.md, "Stop 33")."""
    headroom_memory_s: float = 900.0
    """slo: clean windows older than this no longer inform the spare."""
    headroom_quantile: float = 0.5
    """slo: the spare is this quantile of what the remembered clean windows needed (0.7 until
    stop 21, 0.55 until stop 27; 0.5 meets every target on 35 of 36 cells never tuned on
    against 32, for 0.19 points of mean attainment: docs/benchmarks.md, "Tenth look")."""
    headroom_min_share: float = 0.2
    """slo: a window whose queue p99 was under this share of the budget counts as if at it
    (its wait is batch formation, not queueing: the share is an upper bound of its need)."""
    panic_growth_share: float = 0.1
    """slo: fast path when lag grows faster than this share of ready capacity and the backlog
    will not drain within the SLO."""
    burst_memory_s: float = 1800.0
    """slo: how far back the burst memory reaches."""
    burst_low_share: float = 0.25
    """slo: offered load below this share of the way from the remembered base to the top is
    a gap; a burst starts only above twice this share (noise around one line is neither)."""
    burst_keep_factor: float = 4.0
    """slo: hold capacity through gaps when the median gap is at most this many keep costs
    (keep cost = time-to-ready + `rebalance_pause_s`, in replica-seconds per replica)."""
    burst_peak_quantile: float = 0.75
    """slo: the remembered bursts' peak sized for: this quantile of their peaks."""
    burst_min_ratio: float = 2.5
    """slo: load counts as bursty only when the median burst peaks at this many times the
    remembered base (a steady load's wobble is not a burst)."""
    burst_min_count: int = 2
    """slo: bursts the memory must hold before it keeps capacity through a gap."""
    burst_unknown_margin: float = 0.25
    """slo: while too few bursts are remembered for `burst_peak_quantile` to lie below
    their highest, the floor is sized for the highest lead load times 1 + this (the next
    burst exceeds the highest of n with probability 1 / (n + 1))."""
    standby_after_gap_s: float | None = None
    """slo: once a gap has lasted this long, held capacity waits as warm standby rather than
    as idle consumers (when the deployment supports standby). None: never."""

    def __post_init__(self) -> None:
        infinite = _infinite_fields(self)
        if infinite:
            # Every range check below is false for NaN: it would pass them all.
            raise SignalsError("invalid policy config: " + "; ".join(infinite))
        problems: list[str] = []
        if not 0 < self.target_utilization <= 1:
            problems.append("target_utilization must be in (0, 1]")
        if not 0 <= self.utilization_band < self.target_utilization:
            problems.append("utilization_band must be in [0, target_utilization)")
        if self.target_utilization + self.utilization_band > 1 + 1e-9:
            problems.append("target_utilization + utilization_band must be <= 1")
        if self.scale_down_window_s < 0 or self.stale_after_s <= 0:
            problems.append("scale_down_window_s must be >= 0 and stale_after_s > 0")
        if self.forecast_horizon_s is not None and self.forecast_horizon_s < 0:
            problems.append("forecast_horizon_s must be >= 0")
        if self.forecast_window_s <= 0 or self.default_time_to_ready_s < 0:
            problems.append("forecast_window_s must be > 0, default_time_to_ready_s >= 0")
        if self.forecast_min_t < 0 or self.rate_step_z <= 0:
            problems.append("forecast_min_t must be >= 0 and rate_step_z > 0")
        if not 0 <= self.engine_bound_queue_share < 1:
            problems.append("engine_bound_queue_share must be in [0, 1)")
        if self.max_total_replicas is not None and self.max_total_replicas < 0:
            problems.append("max_total_replicas must be >= 0")
        if self.failed_collections_before_fallback < 1 or self.fallback_replicas < 0:
            problems.append("failed_collections_before_fallback >= 1, fallback_replicas >= 0")
        if not 0 <= self.hpa_tolerance < 1:
            problems.append("hpa_tolerance must be in [0, 1)")
        if self.keda_lag_threshold <= 0 or self.keda_activation_lag_threshold < 0:
            problems.append("keda_lag_threshold > 0, keda_activation_lag_threshold >= 0")
        problems.extend(self._slo_problems())
        if problems:
            raise SignalsError("invalid policy config: " + "; ".join(problems))

    def _slo_problems(self) -> list[str]:
        """Cross-field checks of the SLO policy's own knobs."""
        problems: list[str] = []
        if not (self.scale_up_min_step_share >= 0 and 0 <= self.scale_down_min_step_share < 1):
            problems.append("scale_up_min_step_share >= 0, scale_down_min_step_share in [0, 1)")
        if self.busiest_max_utilization is not None and self.busiest_max_utilization <= 0:
            problems.append("busiest_max_utilization must be > 0 or null")
        if not (
            self.regret_window_s > 0
            and self.regret_hold_growth >= 1
            and self.regret_hold_decay >= 1
            and self.max_regret_hold_factor >= 1
        ):
            problems.append(
                "regret_window_s > 0; regret_hold_growth, regret_hold_decay and "
                "max_regret_hold_factor >= 1"
            )
        holds = (self.scale_down_hold_s, self.scale_down_gap_hold_s)
        if any(h is not None and h < 0 for h in holds):
            problems.append("scale_down_hold_s and scale_down_gap_hold_s must be >= 0")
        if self.rebalance_settle_s < 0 or self.rebalance_pause_s < 0:
            problems.append("rebalance_settle_s and rebalance_pause_s must be >= 0")
        if self.backlog_drain_s <= 0 or self.metrics_window_s <= 0:
            problems.append("backlog_drain_s and metrics_window_s must be > 0")
        spares = (self.min_spare_replicas, self.initial_spare_replicas, self.max_spare_replicas)
        if not 0 <= spares[0] <= spares[1] <= spares[2]:
            problems.append(
                "need 0 <= min_spare_replicas <= initial_spare_replicas <= max_spare_replicas"
            )
        if self.light_load_spare_beta < 0:
            problems.append("light_load_spare_beta must be >= 0")
        if self.headroom_memory_s < 0 or not 0 < self.headroom_quantile <= 1:
            problems.append("headroom_memory_s >= 0 and headroom_quantile in (0, 1]")
        if not 0 <= self.headroom_min_share < 1:
            problems.append("headroom_min_share must be in [0, 1)")
        if self.panic_growth_share < 0 or self.burst_memory_s < 0:
            problems.append("panic_growth_share and burst_memory_s must be >= 0")
        if not 0 < self.burst_low_share < 0.5 or self.burst_keep_factor < 0:
            problems.append("burst_low_share in (0, 0.5), burst_keep_factor >= 0")
        if not 0 < self.burst_peak_quantile <= 1:
            problems.append("burst_peak_quantile must be in (0, 1]")
        if self.burst_min_ratio < 1:
            problems.append("burst_min_ratio must be >= 1")
        if self.burst_min_count < 1:
            problems.append("burst_min_count must be >= 1")
        if self.burst_unknown_margin < 0:
            problems.append("burst_unknown_margin must be >= 0")
        if self.standby_after_gap_s is not None and self.standby_after_gap_s < 0:
            problems.append("standby_after_gap_s must be >= 0")
        return problems

    def time_to_ready_s(self, signals: GroupSignals) -> float:
        """A group's measured time-to-ready, else the default."""
        if signals.time_to_ready_s is not None:
            return signals.time_to_ready_s
        return self.default_time_to_ready_s

    def hold_s(self, signals: GroupSignals) -> float:
        """The SLO policy's scale-down window: configured, else the time-to-ready."""
        if self.scale_down_hold_s is not None:
            return self.scale_down_hold_s
        return self.time_to_ready_s(signals)

    def gap_hold_s(self, signals: GroupSignals) -> float:
        """The SLO policy's scale-down window after a step down: configured, else 2 keep costs."""
        if self.scale_down_gap_hold_s is not None:
            return self.scale_down_gap_hold_s
        return 2 * self.keep_cost_s(signals)

    def keep_cost_s(self, signals: GroupSignals) -> float:
        """Replica-seconds one replica costs to stop and get back: time-to-ready + handover."""
        return self.time_to_ready_s(signals) + self.rebalance_pause_s

    def horizon_s(self, signals: GroupSignals) -> float:
        """Forecast horizon: configured, else time-to-ready plus half the metrics window
        (a window's rate describes its middle, that much in the past)."""
        if self.forecast_horizon_s is not None:
            return self.forecast_horizon_s
        return self.time_to_ready_s(signals) + self.metrics_window_s / 2


def _infinite_fields(config: PolicyConfig) -> list[str]:
    """`name must be finite` for each number field of `config` that is not (no field takes
    Infinity for "never": those say None)."""
    values = ((f.name, getattr(config, f.name)) for f in dataclasses.fields(config))
    return [
        f"{name} {NOT_FINITE}, got {shown(value)}"
        for name, value in values
        if isinstance(value, int | float) and not is_finite(value)
    ]


_PLAIN_BELOW = 1e9
"""Reasons print numbers below this in plain digits, larger ones in 3 significant digits."""


def reason_number(x: float, decimals: int = 0) -> str:
    """A number as a reason's message prints it: `2400`, `3.8` (decimals=1); from 1e9 up
    `4.17e+09`, so an absurd input never prints hundreds of digits."""
    if abs(x) < _PLAIN_BELOW:
        return f"{x:.{decimals}f}"
    try:
        return f"{x:.3g}"
    except OverflowError:  # an int beyond a float's range (a sum of saturated counts)
        return f"more than {sys.float_info.max:.3g}"


def reason_percent(share: float) -> str:
    """A share as a reason's message prints it: `85%`; from 1e7 % up `1.2e+09%`."""
    return f"{share:.0%}" if abs(share) < _PLAIN_BELOW / 100 else f"{share * 100:.3g}%"


@dataclass(frozen=True)
class Reason:
    """One machine-readable reason behind a decision, with the numbers it used."""

    code: str
    message: str
    numbers: Mapping[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"code": self.code, "message": self.message, "numbers": dict(self.numbers)}


@dataclass(frozen=True)
class GroupDecision:
    """Desired replicas for one group, with the reasons and a one-word diagnosis."""

    group: str
    model: str
    tier: Tier
    current: int
    desired: int
    diagnosis: Diagnosis
    reasons: tuple[Reason, ...] = ()
    standby: int = 0
    """Warm standby workers to keep beside the `desired` consuming ones (loaded, not consuming)."""
    current_standby: int = 0
    """Standby workers the group has now (any state)."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON object `scaler decide` prints."""
        return {
            "group": self.group,
            "current": self.current,
            "desired": self.desired,
            "current_standby": self.current_standby,
            "standby": self.standby,
            "reasons": [r.to_dict() for r in self.reasons],
            "diagnosis": self.diagnosis,
        }

    def changes(self) -> bool:
        """True when the actuator has something to do: consuming or standby count differs."""
        return self.desired != self.current or self.standby != self.current_standby

    def line(self) -> str:
        """One line a person can read, e.g. `interactive 4→6: queue p99 700 ms > budget …`."""
        arrow = f"{self.current}→{self.desired}" if self.desired != self.current else "hold"
        if self.standby or self.current_standby:
            arrow += (
                f" +{self.standby} standby"
                if self.standby == self.current_standby
                else f" standby {self.current_standby}→{self.standby}"
            )
        text = "; ".join(r.message for r in self.reasons) or self.diagnosis
        return f"{self.tier} {arrow} ({self.model}, {self.diagnosis}): {text}"


@dataclass(frozen=True)
class Decision:
    """One policy tick: a decision per group, in the order the signals came."""

    policy: str
    at: float
    groups: tuple[GroupDecision, ...]

    def desired(self) -> dict[str, int]:
        """Group name to desired replicas."""
        return {g.group: g.desired for g in self.groups}

    def standby(self) -> dict[str, int]:
        """Group name to warm standby replicas to keep."""
        return {g.group: g.standby for g in self.groups}


# --- JSON snapshots -------------------------------------------------------------------

_FIELDS = {f.name: f for f in dataclasses.fields(GroupSignals)}
_REQUIRED = frozenset(
    name
    for name, f in _FIELDS.items()
    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
)
_INT_FIELDS = frozenset(
    {
        "replicas",
        "ready_replicas",
        "starting_replicas",
        "partitions",
        "lag",
        "min_replicas",
        "max_replicas",
        "warm_replicas",
        "standby_replicas",
        "standby_ready_replicas",
    }
)
_STR_FIELDS = frozenset({"group", "model", "tier"})
_NON_NEGATIVE = frozenset(
    {
        "arrival_rps",
        "service_rps_per_replica",
        "achieved_batch_size",
        "lag",
        "oldest_age_ms",
        "queue_p99_ms",
        "engine_p99_ms",
        "e2e_p99_ms",
        "time_to_ready_s",
        "warm_replicas",
    }
)
"""Measured rates, counts and times a snapshot may leave out but never give below 0."""


def _coerce(group: str, name: str, value: Any) -> Any:
    """Check one snapshot field's JSON type; ints stay ints, numbers become floats."""
    if value is None:
        if name in _REQUIRED:
            raise SignalsError(f"field {name!r} is required and cannot be null", group=group)
        return None
    if name in _STR_FIELDS:
        if not isinstance(value, str):
            raise SignalsError(f"field {name!r} must be a string", group=group)
        return value
    if name == "stale":
        if not isinstance(value, bool):
            raise SignalsError("field 'stale' must be true or false", group=group)
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SignalsError(f"field {name!r} must be a number, got {value!r}", group=group)
    if not is_finite(value):
        raise SignalsError(f"field {name!r} {NOT_FINITE}, got {shown(value)}", group=group)
    if name in _NON_NEGATIVE and value < 0:
        raise SignalsError(f"field {name!r} must be >= 0, got {value!r}", group=group)
    if name in _INT_FIELDS:
        if value != int(value):
            raise SignalsError(f"field {name!r} must be a whole number", group=group)
        return int(value)
    return float(value)


def signals_from_dict(raw: Mapping[str, Any]) -> GroupSignals:
    """Build GroupSignals from a JSON object; unknown or missing fields raise SignalsError."""
    group = str(raw.get("group", "<unnamed>"))
    unknown = sorted(set(raw) - set(_FIELDS))
    if unknown:
        raise SignalsError(
            f"unknown field(s) {unknown}; known fields: {sorted(_FIELDS)}", group=group
        )
    missing = sorted(_REQUIRED - set(raw))
    if missing:
        raise SignalsError(f"missing required field(s) {missing}", group=group)
    values = {name: _coerce(group, name, value) for name, value in raw.items()}
    return GroupSignals(**values)


def signals_to_dict(signals: GroupSignals) -> dict[str, Any]:
    """JSON-ready form of a snapshot (inverse of `signals_from_dict`)."""
    return dataclasses.asdict(signals)


@dataclass(frozen=True)
class Snapshot:
    """A `scaler decide` input: the groups, the policy clock, and optional arrival history."""

    signals: tuple[GroupSignals, ...]
    now: float
    state: ScalerState


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _sample_problem(point: Any) -> str | None:
    """Why one history sample is not `[t, rps]` with both finite and rps >= 0, or None."""
    if not (isinstance(point, list) and len(point) == 2 and all(map(_is_number, point))):
        return "must be [t, rps], two numbers"
    t, rps = point
    if not is_finite(t):
        return f"t {NOT_FINITE}"
    if not is_finite(rps):
        return f"rps {NOT_FINITE}"
    if rps < 0:
        return "rps must be >= 0"
    return None


def _history(raw: Any, path: Path) -> ScalerState:
    """`{"group": [[t, rps], ...]}` seeds the forecast and the burst memory, as if those
    earlier ticks had run."""
    if not isinstance(raw, dict):
        raise SignalsError(f"{path}: 'history' must map group names to [[t, rps], ...]")
    groups = []
    for group, samples in raw.items():
        if not isinstance(samples, list):
            raise SignalsError(f"{path}: history of {group!r} must be [[t, rps], ...]")
        for index, point in enumerate(samples):
            problem = _sample_problem(point)
            if problem is not None:
                raise SignalsError(
                    f"{path}: history of {group!r}, sample {index} {shown(point)}: {problem}"
                )
        points = tuple(sorted((float(t), float(v)) for t, v in samples))
        since = points[0][0] if points else None
        groups.append(GroupState(group=group, arrival_samples=points, observed_since=since))
    return ScalerState(groups=tuple(groups))


def _with_loads(state: ScalerState, signals: Sequence[GroupSignals]) -> ScalerState:
    """History also seeds the burst memory: rps over the group's per-replica throughput."""
    mus = {s.group: s.service_rps_per_replica for s in signals}
    groups = []
    for g in state.groups:
        mu = mus.get(g.group)
        loads = tuple((t, v / mu) for t, v in g.arrival_samples) if mu else ()
        groups.append(dataclasses.replace(g, load_samples=loads, service_rps_per_replica=mu))
    return ScalerState(groups=tuple(groups))


def load_snapshot(path: Path) -> Snapshot:
    """Read a snapshot: a group object, a list of them, or `{"now", "groups", "history"}`.

    `now` defaults to the newest `collected_at`, so an old file is not stale by itself.
    """
    raw = _read_json(path)
    now: Any = None
    state = ScalerState()
    if isinstance(raw, dict) and "groups" in raw:
        extra = sorted(set(raw) - {"groups", "now", "history", "comment"})
        if extra:
            raise SignalsError(f"{path}: unknown top-level field(s) {extra}")
        now = raw.get("now")
        if "history" in raw:
            state = _history(raw["history"], path)
        raw = raw["groups"]
    items: Sequence[Any] = raw if isinstance(raw, list) else [raw]
    if not items or not all(isinstance(item, dict) for item in items):
        raise SignalsError(f"{path} must hold a group object or a non-empty list of them")
    signals = tuple(signals_from_dict(item) for item in items)
    names = [s.group for s in signals]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise SignalsError(f"{path}: group(s) {twice} given more than once")
    unknown = sorted({g.group for g in state.groups} - set(names))
    if unknown:
        raise SignalsError(f"{path}: history for group(s) {unknown} that the snapshot lacks")
    state = _with_loads(state, signals)
    if now is None:
        now = max(s.collected_at for s in signals)
    elif not _is_number(now) or not is_finite(now):
        raise SignalsError(f"{path}: 'now' must be a finite number of seconds, got {shown(now)}")
    ahead = [s.group for s in signals if s.collected_at > now]
    if ahead:
        raise SignalsError(f"{path}: collected_at of {ahead} is after 'now' ({now})")
    future = _history_after(state, now)
    if future:
        raise SignalsError(f"{path}: history of {future} has samples after 'now' ({now})")
    return Snapshot(signals=signals, now=float(now), state=state)


def _history_after(state: ScalerState, now: float) -> list[str]:
    """Groups whose history holds a sample later than `now` (a sample not yet taken)."""
    return [g.group for g in state.groups if any(t > now for t, _ in g.arrival_samples)]


def _read_json(path: Path) -> Any:
    """A user's JSON file, or one SignalsError that says what is wrong with it."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SignalsError(f"cannot read {path}: {exc.strerror}") from exc
    except UnicodeDecodeError:
        raise SignalsError(f"{path} is not UTF-8 text (JSON expected)") from None
    except json.JSONDecodeError as exc:
        raise SignalsError(f"{path} is not valid JSON: {exc}") from exc


_CONFIG_TYPES = {f.name: str(f.type) for f in dataclasses.fields(PolicyConfig)}
_CONFIG_FIELDS = set(_CONFIG_TYPES)


def _config_value_problem(name: str, value: Any) -> str | None:
    """Why a config value does not fit its field's type (numbers only), or None."""
    kind = _CONFIG_TYPES[name]
    if value is None:
        return None if kind.endswith("| None") else f"{name} cannot be null"
    if not _is_number(value):
        return f"{name} must be a number, got {value!r}"
    if not is_finite(value):
        return f"{name} {NOT_FINITE}, got {shown(value)}"
    if kind.startswith("int") and value != int(value):
        return f"{name} must be a whole number, got {value!r}"
    return None


def config_from_dict(raw: Mapping[str, Any]) -> PolicyConfig:
    """Build PolicyConfig from a JSON object; unknown fields raise SignalsError."""
    unknown = sorted(set(raw) - _CONFIG_FIELDS)
    if unknown:
        raise SignalsError(f"unknown config field(s) {unknown}; known: {sorted(_CONFIG_FIELDS)}")
    problems = [p for name, v in raw.items() if (p := _config_value_problem(name, v))]
    if problems:
        raise SignalsError("invalid policy config: " + "; ".join(problems))
    try:
        return PolicyConfig(**raw)
    except TypeError as exc:
        raise SignalsError(f"invalid policy config: {exc}") from exc


def load_config(path: Path) -> PolicyConfig:
    """Read a PolicyConfig JSON file."""
    raw = _read_json(path)
    if not isinstance(raw, dict):
        raise SignalsError(f"{path} must hold a JSON object")
    return config_from_dict(raw)

"""The policies' knobs (`PolicyConfig`) and reading them from a JSON file."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scaler.signals import (
    NOT_FINITE,
    GroupSignals,
    SignalsError,
    is_finite,
    is_json_number,
    read_json_file,
    shown,
)


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
    burst_floor_busiest_max_utilization: float | None = 1.0
    """slo: add consumers to a burst floor until its busiest member (the one with the most
    partitions) would run at most this busy at the load the floor is kept for
    (`policy/hold.py`). 1.0, not `busiest_max_utilization`: the floor's count already holds
    the learned spare, so the rule only keeps the busiest member within its capacity (30
    consumers of 32 partitions left two of them with twice the others' share of a spike);
    None: size the floor for the mean only."""
    scale_down_min_step_share: float = 0.0
    """slo: skip a scale-down smaller than this share of current (min 1 replica)."""
    scale_down_hold_s: float | None = None
    """slo: scale down only to the highest recommendation over this long (its own window,
    instead of `scale_down_window_s`, which the baselines keep). None: the reaction time
    (`reaction_s`)."""
    scale_down_gap_hold_s: float | None = None
    """slo: after arrivals step down, scale down only to the highest recommendation over
    this long (a gap may end in a burst). None: 2 x (time-to-ready + handover)."""
    cap_hold_s: float = 300.0
    """slo: after the offered load needed the group's cap (its partitions or `max_replicas`
    run at `target_utilization`), keep the cap this long (HPA's default window), unless the
    burst memory saw a gap at least this long (at most `burst_memory_s`). At the cap there
    is no headroom to drain the backlog a cold start builds, so a load that comes back
    meets cold replicas for its whole length, not for a start (`periodic` x30: 86 %
    attainment against hpa-util's 96 %; docs/benchmarks.md, "Stop 51"). 0 turns it off
    (`policy/cap_hold.py`)."""
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
    against 32, for 0.19 points of mean attainment: docs/benchmarks.md, "Tenth look"). Since
    the queue budget reads the e2e p99 (stop 52) 0.7 buys 0.67 points of mean attainment on
    the 96 tuning cells for 0.07x of the oracle's replica-seconds (81 meet every target,
    against 94)."""
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
    burst_schedule_intervals: int = 2
    """slo: when this many intervals between the last burst onsets agree
    (`burst_schedule_tolerance_share`), the next burst is due one interval after the last,
    and its floor starts a time-to-ready + `rebalance_pause_s` + a metrics window + the
    intervals' spread before that (`policy/hold.py`, `burst_due`); 0 turns this off."""
    burst_schedule_tolerance_share: float = 0.1
    """slo: the share of their median by which those intervals may differ."""
    standby_after_gap_s: float | None = None
    """slo: once a gap has lasted this long, held capacity waits as warm standby rather than
    as idle consumers (when the deployment supports standby). None: never."""

    def __post_init__(self) -> None:
        infinite = _infinite_fields(self)
        if infinite:
            # Every range check below is false for NaN: it would pass them all.
            raise SignalsError("invalid policy config: " + "; ".join(infinite))
        problems = [
            f"{name} must be {wording}, got {shown(value)}"
            for name, holds, wording in _RANGES
            if (value := getattr(self, name)) is not None and not holds(value)
        ]
        problems.extend(self._across_fields())
        if problems:
            raise SignalsError("invalid policy config: " + "; ".join(problems))

    def _across_fields(self) -> list[str]:
        """The checks that tie one field to another."""
        problems: list[str] = []
        if self.utilization_band >= self.target_utilization:
            problems.append(
                f"utilization_band must be under target_utilization "
                f"({shown(self.target_utilization)}), got {shown(self.utilization_band)}"
            )
        if self.target_utilization + self.utilization_band > 1 + 1e-9:
            problems.append("target_utilization + utilization_band must be <= 1")
        spares = (self.min_spare_replicas, self.initial_spare_replicas, self.max_spare_replicas)
        if not spares[0] <= spares[1] <= spares[2]:
            problems.append(
                "need min_spare_replicas <= initial_spare_replicas <= max_spare_replicas, got "
                + " <= ".join(shown(v) for v in spares)
            )
        if self.cap_hold_s > self.burst_memory_s:
            # The loads it looks back on are the burst memory's.
            problems.append("cap_hold_s must be <= burst_memory_s")
        return problems

    def time_to_ready_s(self, signals: GroupSignals) -> float:
        """A group's measured time-to-ready, else the default."""
        if signals.time_to_ready_s is not None:
            return signals.time_to_ready_s
        return self.default_time_to_ready_s

    def reaction_s(self, signals: GroupSignals) -> float:
        """How long the SLO policy's timing assumes new capacity takes to answer a need: the
        time-to-ready, never less than two metrics windows.

        A need shows in the collector's rates about a window late and is told from noise by
        the next; a replica that starts faster than that still answers a need no sooner.
        Timed by a 5 s start, the scale-down hold, the keep cost and the burst lead shrank to
        seconds, and the group scaled down in the middle of bursts: on-off ×10 85.7 %
        attainment against 98.5 % at a 30 s start (docs/benchmarks.md, "Stop 44")."""
        return max(self.time_to_ready_s(signals), 2 * self.metrics_window_s)

    def hold_s(self, signals: GroupSignals) -> float:
        """The SLO policy's scale-down window: configured, else the reaction time."""
        if self.scale_down_hold_s is not None:
            return self.scale_down_hold_s
        return self.reaction_s(signals)

    def gap_hold_s(self, signals: GroupSignals) -> float:
        """The SLO policy's scale-down window after a step down: configured, else 2 keep costs."""
        if self.scale_down_gap_hold_s is not None:
            return self.scale_down_gap_hold_s
        return 2 * self.keep_cost_s(signals)

    def keep_cost_s(self, signals: GroupSignals) -> float:
        """Replica-seconds one replica costs to stop and get back: the reaction time (what a
        burst waits for it) + handover."""
        return self.reaction_s(signals) + self.rebalance_pause_s

    def horizon_s(self, signals: GroupSignals) -> float:
        """Forecast horizon: configured, else time-to-ready plus half the metrics window
        (a window's rate describes its middle, that much in the past)."""
        if self.forecast_horizon_s is not None:
            return self.forecast_horizon_s
        return self.reaction_s(signals) + self.metrics_window_s / 2


def _at_least(low: float) -> Callable[[float], bool]:
    return lambda v: v >= low


def _above(low: float) -> Callable[[float], bool]:
    return lambda v: v > low


def _within(low: float, high: float) -> Callable[[float], bool]:
    """[low, high)"""
    return lambda v: low <= v < high


_RANGES: tuple[tuple[str, Callable[[float], bool], str], ...] = (
    ("target_utilization", lambda v: 0 < v <= 1, "in (0, 1]"),
    ("utilization_band", _at_least(0), ">= 0"),
    ("scale_down_window_s", _at_least(0), ">= 0"),
    ("stale_after_s", _above(0), "> 0"),
    ("forecast_horizon_s", _at_least(0), ">= 0"),
    ("forecast_window_s", _above(0), "> 0"),
    ("default_time_to_ready_s", _at_least(0), ">= 0"),
    ("forecast_min_t", _at_least(0), ">= 0"),
    ("rate_step_z", _above(0), "> 0"),
    ("engine_bound_queue_share", _within(0, 1), "in [0, 1)"),
    ("max_total_replicas", _at_least(0), ">= 0"),
    ("failed_collections_before_fallback", _at_least(1), ">= 1"),
    ("fallback_replicas", _at_least(0), ">= 0"),
    ("hpa_tolerance", _within(0, 1), "in [0, 1)"),
    ("keda_lag_threshold", _above(0), "> 0"),
    ("keda_activation_lag_threshold", _at_least(0), ">= 0"),
    ("scale_up_min_step_share", _at_least(0), ">= 0"),
    ("scale_down_min_step_share", _within(0, 1), "in [0, 1)"),
    ("busiest_max_utilization", _above(0), "> 0 or null"),
    ("burst_floor_busiest_max_utilization", _above(0), "> 0 or null"),
    ("regret_window_s", _above(0), "> 0"),
    ("regret_hold_growth", _at_least(1), ">= 1"),
    ("regret_hold_decay", _at_least(1), ">= 1"),
    ("max_regret_hold_factor", _at_least(1), ">= 1"),
    ("scale_down_hold_s", _at_least(0), ">= 0"),
    ("scale_down_gap_hold_s", _at_least(0), ">= 0"),
    ("cap_hold_s", _at_least(0), ">= 0"),
    ("rebalance_settle_s", _at_least(0), ">= 0"),
    ("rebalance_pause_s", _at_least(0), ">= 0"),
    ("backlog_drain_s", _above(0), "> 0"),
    ("metrics_window_s", _above(0), "> 0"),
    ("min_spare_replicas", _at_least(0), ">= 0"),
    ("light_load_spare_beta", _at_least(0), ">= 0"),
    ("headroom_memory_s", _at_least(0), ">= 0"),
    ("headroom_quantile", lambda v: 0 < v <= 1, "in (0, 1]"),
    ("headroom_min_share", _within(0, 1), "in [0, 1)"),
    ("panic_growth_share", _at_least(0), ">= 0"),
    ("burst_memory_s", _at_least(0), ">= 0"),
    ("burst_low_share", lambda v: 0 < v < 0.5, "in (0, 0.5)"),
    ("burst_keep_factor", _at_least(0), ">= 0"),
    ("burst_peak_quantile", lambda v: 0 < v <= 1, "in (0, 1]"),
    ("burst_min_ratio", _at_least(1), ">= 1"),
    ("burst_min_count", _at_least(1), ">= 1"),
    ("burst_schedule_intervals", _at_least(0), ">= 0"),
    ("burst_schedule_tolerance_share", _within(0, 1), "in [0, 1)"),
    ("burst_unknown_margin", _at_least(0), ">= 0"),
    ("standby_after_gap_s", _at_least(0), ">= 0 or null"),
)
"""Each field's own range, where it has one (None passes: those say "never" or "none");
a refusal names the field and its value."""


def _infinite_fields(config: PolicyConfig) -> list[str]:
    """`name must be finite` for each number field of `config` that is not (no field takes
    Infinity for "never": those say None)."""
    values = ((f.name, getattr(config, f.name)) for f in dataclasses.fields(config))
    return [
        f"{name} {NOT_FINITE}, got {shown(value)}"
        for name, value in values
        if isinstance(value, int | float) and not is_finite(value)
    ]


_CONFIG_TYPES = {f.name: str(f.type) for f in dataclasses.fields(PolicyConfig)}
_CONFIG_FIELDS = set(_CONFIG_TYPES)


def _config_value_problem(name: str, value: Any) -> str | None:
    """Why a config value does not fit its field's type (numbers only), or None."""
    kind = _CONFIG_TYPES[name]
    if value is None:
        return None if kind.endswith("| None") else f"{name} cannot be null"
    if not is_json_number(value):
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
    # JSON's 2.0 is a whole number an int field takes; kept a float, it failed as a count
    # (a slice) in the middle of a decision.
    values = {
        name: int(v) if _CONFIG_TYPES[name].startswith("int") and v is not None else v
        for name, v in raw.items()
    }
    try:
        return PolicyConfig(**values)
    except TypeError as exc:
        raise SignalsError(f"invalid policy config: {exc}") from exc


def load_config(path: Path) -> PolicyConfig:
    """Read a PolicyConfig JSON file."""
    raw = read_json_file(path)
    if not isinstance(raw, dict):
        raise SignalsError(f"{path} must hold a JSON object")
    return config_from_dict(raw)

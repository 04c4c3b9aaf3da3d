"""What arrives: the rate the policy sizes for, read from the collector's samples and the lag."""

from __future__ import annotations

import itertools
import math

from scaler.config import PolicyConfig
from scaler.forecast import RateEstimate, estimate_rate
from scaler.policy.plan import Plan
from scaler.signals import GroupSignals, GroupState


def arrival_estimate(plan: Plan, config: PolicyConfig) -> RateEstimate | None:
    """The arrival rate read from this tick and the recent samples (`forecast.py`)."""
    s = plan.signals
    if s.arrival_rps is None:
        return None
    samples = (
        *window(plan.state.arrival_samples, config.forecast_window_s, s.collected_at),
        (s.collected_at, s.arrival_rps),
    )
    try:
        return estimate_rate(
            samples,
            config.horizon_s(s),
            min_t=config.forecast_min_t,
            step_z=config.rate_step_z,
            overlap=config.metrics_window_s / _spacing_s(samples),
        )
    except OverflowError:
        # Rates or times beyond ~1e154 square past a float: no line fits them. Such a rate
        # asks for more replicas than any group has; size for the last window as measured.
        return RateEstimate("mean", s.arrival_rps, s.arrival_rps)


def _spacing_s(samples: tuple[tuple[float, float], ...]) -> float:
    """The median time between samples (the collection interval); inf with fewer than two."""
    gaps = sorted(b[0] - a[0] for a, b in itertools.pairwise(samples) if b[0] > a[0])
    return gaps[len(gaps) // 2] if gaps else math.inf


def arriving_rps(s: GroupSignals, state: GroupState) -> float | None:
    """Arrivals now: the window's rate, or more when the lag grew faster since the last tick.

    The window's average trails a burst that started inside it (and a burst shorter than
    the window never shows its height); the lag's growth between two ticks does not. The
    replicas complete at most their capacity and no more than the window's arrivals.
    """
    lam = s.arrival_rps
    if lam is None:
        return None
    mu = s.service_rps_per_replica or state.service_rps_per_replica
    if state.last_lag is None or s.lag is None or not mu:
        return lam
    then, lag_then = state.last_lag
    dt = s.collected_at - then
    if dt <= 0:
        return lam
    growth = (s.lag - lag_then) / dt
    capacity = min(s.ready_replicas, s.partitions) * mu
    return max(lam, min(capacity, lam) + growth)


def window(
    samples: tuple[tuple[float, float], ...], window_s: float, until: float
) -> tuple[tuple[float, float], ...]:
    """The samples within `window_s` before `until` (the tick's collection time).

    The pipeline prunes its memory at each fresh tick; a snapshot's `history` can be
    longer, and after stale ticks (a collector outage) the memory is as old as the outage:
    measured from the newest sample instead, a first fresh tick fitted its rate across the
    outage to samples from before it.
    """
    return tuple((t, v) for t, v in samples if until - t <= window_s)

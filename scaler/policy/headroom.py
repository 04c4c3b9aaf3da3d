"""Headroom: how many replicas beyond the busy ones keep queue p99 within its budget.

The seed sized at a fixed 70 % utilization. What a group needs depends on how bursty its
arrivals are below the collector's window, which no rate shows, and it is not a share of
the load: on the Azure conversation trace replayed at 20x the oracle keeps ~5 replicas
beyond the busy ones whether 2 or 11 are busy (utilization 27 % at night, 70 % at the
peak), ~7 at 30x. That is queueing theory's heavy-traffic picture: the wait scales with
1 / (spare servers) (Kingman, and Whitt for many servers), not with utilization.

So the policy sizes `busy + spare` (never above `target_utilization + utilization_band`).
Each clean window (no consumer joined or left in it, ordered by the scaler or not: a worker
that died and was started again counts, the arrival rate steady) tells what
spare would have put its queue p99 exactly at the budget: spare seen × queue p99 / budget.
A queue p99 under `headroom_min_share` of the budget is mostly batch formation, which no
spare shrinks, so such a window counts as if at that share: an upper bound of its need.
(Skipping them instead left a group whose queue never reached the share on its initial
spare for good: live run K1 held 8 replicas where 5 served.) The spare is the
`headroom_quantile` of those over `headroom_memory_s`; until there are five,
`initial_spare_replicas`.
"""

from __future__ import annotations

import dataclasses
import math

from scaler.config import PolicyConfig
from scaler.decision import Reason, reason_number
from scaler.policy.counts import ceil_count
from scaler.policy.plan import Plan
from scaler.policy.rate import window
from scaler.policy.rebalance import queue_budget_ms
from scaler.signals import GroupSignals, GroupState

_EPS = 1e-9
_MIN_SAMPLES = 5
_STEADY_SHARE = 0.25
"""The arrival rate changed less than this share over the window: the window is steady."""


def learned_spare(state: GroupState, config: PolicyConfig) -> float | None:
    """The spare the clean windows taught, or None before there are five of them."""
    samples = sorted(x for _, x in state.spare_samples)
    if len(samples) < _MIN_SAMPLES:
        return None
    at = min(len(samples) - 1, math.ceil(config.headroom_quantile * len(samples)) - 1)
    return min(config.max_spare_replicas, max(config.min_spare_replicas, samples[at]))


def spare_replicas(state: GroupState, config: PolicyConfig) -> float:
    """The spare replicas the SLO policy sizes for now."""
    learned = learned_spare(state, config)
    return config.initial_spare_replicas if learned is None else learned


def load_spare(load: float, state: GroupState, config: PolicyConfig) -> float:
    """The spare beside `load` busy replicas: the learned one; before it is learned, the
    initial guess capped at β·√load.

    The initial spare is a guess for heavy traffic, and a trickle never teaches better:
    live, 0.3 req/s on a worker that serves 2,815/s was sized "0.0 busy + 4.0 spare: 5";
    each window with a request in it started a worker that the next idle one stopped, and
    no window was clean enough to learn from. Square-root staffing (Halfin and Whitt)
    keeps β·√R beyond R busy servers; at the default β (`light_load_spare_beta`, 4) the
    guess of 4 holds from one busy replica up. A learned spare is evidence and stands: a
    bursty group at 0.2 busy can need 16 (the on-off family).
    """
    learned = learned_spare(state, config)
    if learned is not None:
        return learned
    cap = config.light_load_spare_beta * math.sqrt(max(load, 0.0))
    return min(config.initial_spare_replicas, cap)


def replicas_for(load: float, state: GroupState, config: PolicyConfig) -> int:
    """Replicas for `load` busy replicas' worth of work: busy + spare, at most the ceiling."""
    if load <= 0:
        return 0
    ceiling = config.target_utilization + config.utilization_band
    spare = load_spare(load, state, config)
    return max(ceil_count(load / ceiling - _EPS), ceil_count(load + spare - _EPS))


def _clean(s: GroupSignals, state: GroupState, config: PolicyConfig, now: float) -> bool:
    """No consumer joined or left, and the arrival rate held steady, inside the window."""
    # A change is seen at the tick after it happened; its pause must be out of the window too.
    settled = config.metrics_window_s + config.rebalance_pause_s
    if state.last_change_at is not None and now - state.last_change_at <= settled:
        return False
    if s.newest_ready_at is not None and now - s.newest_ready_at <= settled:
        return False  # a consumer joined that the scaler did not order (a crash's replacement)
    if not s.ready_replicas or s.arrival_rps is None:
        return False
    recent = window(state.arrival_samples, config.forecast_window_s, s.collected_at)
    before = [v for t, v in recent if t <= now - config.metrics_window_s]
    if not before:
        return False
    return abs(s.arrival_rps - before[-1]) <= _STEADY_SHARE * max(s.arrival_rps, before[-1])


def learn(plan: Plan, config: PolicyConfig, now: float) -> Plan:
    """Remember what spare this window would have needed, if it is clean; forget old ones."""
    s, state = plan.signals, plan.state
    kept = tuple((t, x) for t, x in state.spare_samples if now - t <= config.headroom_memory_s)
    plan = dataclasses.replace(plan, state=dataclasses.replace(state, spare_samples=kept))
    u, q = s.utilization, s.queue_p99_ms
    budget = queue_budget_ms(s)
    if u is None or q is None or not _clean(s, state, config, now):
        return plan
    # Under the floor the wait is mostly batch formation: the window is only an upper
    # bound, what the floor's queue p99 would have needed.
    counted = max(q, config.headroom_min_share * budget)
    seen = min(s.ready_replicas, s.partitions) * (1 - u)
    needed = seen * counted / budget
    before = spare_replicas(plan.state, config)
    learned = dataclasses.replace(
        plan.state, spare_samples=(*plan.state.spare_samples, (now, needed))
    )
    plan = dataclasses.replace(plan, state=learned)
    after = spare_replicas(learned, config)
    if abs(after - before) < 0.05:
        return plan
    return plan.with_(
        reason=Reason(
            "spare_learned",
            f"queue p99 {reason_number(q)} ms (budget {reason_number(budget)} ms) with "
            f"{reason_number(seen, 1)} spare replicas: {reason_number(needed, 1)} would have met "
            f"it; size for {reason_number(after, 1)} spare (was {reason_number(before, 1)})",
            {"queue_p99_ms": q, "queue_budget_ms": budget, "spare_seen": seen, "spare": after},
        )
    )

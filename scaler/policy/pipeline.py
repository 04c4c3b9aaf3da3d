"""Runs a policy's sizing step for every group inside the shared guards, budget and memory."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from scaler.config import PolicyConfig
from scaler.decision import Decision
from scaler.policy.budget import share_budget
from scaler.policy.guards import (
    apply_bounds,
    apply_caps,
    blind,
    cap_standby,
    is_stale,
    stabilize,
)
from scaler.policy.plan import Plan
from scaler.policy.rate import arriving_rps
from scaler.signals import GroupSignals, GroupState, ScalerState

SizeStep = Callable[[GroupSignals, GroupState, PolicyConfig, float], Plan]
StabilizeStep = Callable[[Plan, PolicyConfig, float], Plan]
"""Scale-down damping after the bounds: HPA's window for the baselines."""
"""A policy's own part: fresh signals in, a plan with an unbounded desired count out."""

PolicyFn = Callable[
    [Sequence[GroupSignals], ScalerState, PolicyConfig, float], tuple[Decision, ScalerState]
]
"""What every policy is: `decide(signals, state, config, now) -> (Decision, new state)`."""


@dataclass(frozen=True)
class Pipeline:
    """A named policy: its sizing step plus which shared rules it follows."""

    name: str
    size: SizeStep
    warm_floor: bool
    partition_cap: bool
    global_budget: bool
    stabilizer: StabilizeStep = stabilize

    def __call__(
        self,
        signals: Sequence[GroupSignals],
        state: ScalerState,
        config: PolicyConfig,
        now: float,
    ) -> tuple[Decision, ScalerState]:
        """Decide every group, then share the budget; returns the decision and new state."""
        seen = {s.group for s in signals}
        if len(seen) != len(signals):
            raise ValueError("signals name the same group twice")
        # A group the collector stopped reporting is decided on its last snapshot, as stale,
        # so that a collector failure can never read as "no load".
        vanished = [
            dataclasses.replace(g.last_signals, stale=True)
            for g in state.groups
            if g.group not in seen and g.last_signals is not None
        ]
        # A group remembered with no signals at all (recalled at a restart, `to_resume`,
        # and not collected yet) gets no decision, and keeps its memory until it is.
        waiting = tuple(g for g in state.groups if g.group not in seen and g.last_signals is None)
        plans = [self._plan(s, state.get(s.group), config, now) for s in (*signals, *vanished)]
        if self.global_budget:
            plans = share_budget(plans, config.max_total_replicas)
        decision = Decision(policy=self.name, at=now, groups=tuple(p.to_decision() for p in plans))
        remembered = tuple(_remember(p, config, now) for p in plans)
        return decision, ScalerState(groups=(*remembered, *waiting))

    def _plan(
        self, signals: GroupSignals, state: GroupState, config: PolicyConfig, now: float
    ) -> Plan:
        if is_stale(signals, config, now):
            return blind(signals, state, config, now)
        if state.observed_since is None:
            state = dataclasses.replace(state, observed_since=now)
        plan = self.size(signals, state, config, now)
        bounded = apply_bounds(plan, warm_floor=self.warm_floor, partition_cap=self.partition_cap)
        plan = self.stabilizer(bounded, config, now)
        if plan.desired > bounded.desired:
            # A held scale-down keeps the current count, which may be over the max or the
            # partitions (a max lowered, workers started by hand): those go at once.
            plan = apply_caps(plan, partition_cap=self.partition_cap)
        return cap_standby(plan.top_up_standby())


def _remember(plan: Plan, config: PolicyConfig, now: float) -> GroupState:
    """The group's memory after this tick."""
    state, s = plan.state, plan.signals
    if not plan.fresh:
        return dataclasses.replace(state, failed_collections=state.failed_collections + 1)
    samples = state.arrival_samples
    if s.arrival_rps is not None:
        samples = (*samples, (s.collected_at, s.arrival_rps))
    samples = tuple((t, v) for t, v in samples if now - t <= config.forecast_window_s)
    mu = s.service_rps_per_replica or state.service_rps_per_replica
    loads = state.load_samples
    arriving = arriving_rps(s, state)
    if arriving is not None and (mu or arriving == 0):
        loads = (*loads, (s.collected_at, arriving / mu if mu else 0.0))
    loads = tuple((t, v) for t, v in loads if now - t <= config.burst_memory_s)
    last_ready = state.last_ready_replicas
    changing = plan.desired < s.replicas or (
        last_ready is not None and last_ready != s.ready_replicas
    )
    return dataclasses.replace(
        state,
        arrival_samples=samples,
        load_samples=loads,
        service_rps_per_replica=mu,
        last_lag=None if s.lag is None else (s.collected_at, s.lag),
        last_change_at=now if changing else state.last_change_at,
        failed_collections=0,
        last_ready_replicas=s.ready_replicas,
        last_signals=s,
        observed_since=now if state.observed_since is None else state.observed_since,
    )

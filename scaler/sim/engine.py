"""The discrete-event loop: policy ticks, replica readiness and departures on one heap."""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from scaler.actuators.decisions import Written, decision_record, what_it_says, worth_writing
from scaler.checkpoint import checkpoint_due, config_digest, tick_checkpoints
from scaler.config import PolicyConfig
from scaler.decision import Decision
from scaler.policy import POLICIES
from scaler.recall import recall, replay_span_s, to_resume
from scaler.settings import IDLE_HOLD_EVERY_MAX_S, IDLE_HOLD_EVERY_S
from scaler.signals import GroupSignals, ScalerState
from scaler.sim.group import GroupSim, Replica
from scaler.sim.params import SimParams
from scaler.sim.workload import FloatArray, Workload
from schemas.topics import TIERS, Tier, worker_group

EventKind = Literal["tick", "ready"]
Progress = Callable[[float, float], None]
"""Called as progress(sim_time_s, end_s) after every tick."""


@dataclass(frozen=True)
class TickRecord:
    """What one group looked like at one policy tick (for plots and the warm-up check)."""

    t: float
    tier: Tier
    arrival_rps: float
    replicas: int
    ready: int
    desired: int
    standby: int
    """Standby replicas the group had at the tick (warming or warm)."""
    desired_standby: int
    queue_p99_ms: float | None
    e2e_p99_ms: float | None
    diagnosis: str


@dataclass(frozen=True)
class GroupOutcome:
    """Per-request results and cost of one group after the run."""

    name: str
    tier: Tier
    slo_p99_e2e_ms: float
    arrivals: FloatArray
    e2e_s: FloatArray
    """Seconds from arrival to result; NaN for requests never served."""
    replica_seconds: float
    actions: int
    ready_times: tuple[tuple[float, float], ...]
    """(start requested, ready at) for every replica started during the run."""


@dataclass(frozen=True)
class SimRun:
    """One policy on one workload."""

    policy: str
    groups: tuple[GroupOutcome, ...]
    ticks: tuple[TickRecord, ...]
    lines: tuple[str, ...]
    """The readable line of every decision that changed something."""
    wall_s: float


def policy_config(config: PolicyConfig, params: SimParams) -> PolicyConfig:
    """The config the policies run with in this cluster: where it sets no global budget, the
    cluster's `max_total_replicas` is the budget (as the live scaler is given the cluster's)."""
    if config.max_total_replicas is not None or params.max_total_replicas is None:
        return config
    return dataclasses.replace(config, max_total_replicas=params.max_total_replicas)


def initial_counts(wanted: int, groups: int, budget: int | None) -> list[int]:
    """Replicas each group starts with: `wanted`, or within the cluster's budget an even
    share, the earlier (higher) tiers taking the remainder."""
    if budget is None or wanted * groups <= budget:
        return [wanted] * groups
    share, left = divmod(budget, groups)
    return [share + (1 if i < left else 0) for i in range(groups)]


class _Loop:
    """Mutable simulation state; lives for one `simulate` call."""

    def __init__(self, workload: Workload, params: SimParams, policy: str, config: PolicyConfig):
        self.params, self.policy_name = params, policy
        self.config = policy_config(config, params)
        self.policy = POLICIES[policy]
        self.end_s = workload.duration_s + params.drain_s
        tiers = [t for t in TIERS if t in workload.tiers]
        self.groups = [
            GroupSim(worker_group("sim", t), t, workload.tiers[t], params) for t in tiers
        ]
        self.state = ScalerState()
        self.records: list[Any] = []
        """The decision records a restarted scaler reads back, as the live one writes them
        (kept only while a restart is to come)."""
        self.written: dict[str, Written] = {}
        self.checkpoint_at: float | None = None
        """When the records last carried the memory (`scaler/checkpoint.py`)."""
        self.restart_at = params.scaler_restart_at_s
        self.last_arrival = max(
            (float(g.times[-1]) for g in self.groups if g.times.size), default=0.0
        )
        self.events: list[tuple[float, int, EventKind, int]] = []
        self.seq = itertools.count()
        self.ticks: list[TickRecord] = []
        self.lines: list[str] = []
        self.actions = [0] * len(self.groups)
        self.started: list[list[tuple[float, float]]] = [[] for _ in self.groups]
        wanted = params.initial_replicas if params.initial_replicas is not None else 1
        counts = initial_counts(wanted, len(self.groups), params.max_total_replicas)
        for g, count in zip(self.groups, counts, strict=True):
            g.start_with(count)

    def push(self, t: float, kind: EventKind, group: int = -1) -> None:
        heapq.heappush(self.events, (t, next(self.seq), kind, group))

    def in_use(self, now: float) -> int:
        """Replicas holding a GPU now, over all groups (leaving ones until they are gone)."""
        return sum(
            1 for g in self.groups for r in g.replicas if r.gone_at is None or r.gone_at > now
        )

    def run(self, progress: Progress | None) -> None:
        self.push(self.params.collection_interval_s, "tick")
        while self.events:
            t, _, kind, gi = heapq.heappop(self.events)
            for g in self.groups:
                g.advance(t)
            if kind == "tick":
                if self._tick(t) and t + self.params.collection_interval_s <= self.end_s:
                    self.push(t + self.params.collection_interval_s, "tick")
                if progress is not None:
                    progress(t, self.end_s)
            elif self._joins(gi, t):
                self.groups[gi].membership_changed(t)
        for g in self.groups:
            g.advance(self.end_s)

    def _tick(self, now: float) -> bool:
        """Collect, decide, act; False once everything is served after the last arrival."""
        # Arrival rate over the metrics window, like the collector's offset delta: a 5 s
        # delta of a bursty trace is mostly noise.
        signals = [
            g.collect(now, max(self.params.collection_interval_s, self.params.metrics_window_s))
            for g in self.groups
        ]
        if self.restart_at is not None and now >= self.restart_at:
            if now < self.restart_at + self.params.scaler_restart_gap_s:
                # No scaler between the old process and the new one: nothing is decided.
                self._record(signals, None, now)
                return self._serving(now)
            self.restart_at = None
            self.state = self._restarted(now)
        decision, self.state = self.policy(signals, self.state, self.config, now)
        if self.restart_at is not None and self._recalls():
            self._write(decision, signals, now)
        self._apply(decision, now)
        self._record(signals, decision, now)
        return self._serving(now)

    def _serving(self, now: float) -> bool:
        """Arrivals are still to come, or requests still to serve."""
        return now < self.last_arrival or any(g.unserved_left() for g in self.groups)

    def _record(
        self, signals: Sequence[GroupSignals], decision: Decision | None, now: float
    ) -> None:
        """The tick as the report shows it; with no decision (no scaler running), every
        group as it is, diagnosed `no_scaler`."""
        decided = (None,) * len(signals) if decision is None else decision.groups
        for s, d in zip(signals, decided, strict=True):
            self.ticks.append(
                TickRecord(
                    t=now,
                    tier=s.tier,
                    arrival_rps=s.arrival_rps or 0.0,
                    replicas=s.replicas,
                    ready=s.ready_replicas,
                    desired=s.replicas if d is None else d.desired,
                    standby=s.standby_replicas or 0,
                    desired_standby=(s.standby_replicas or 0) if d is None else d.standby,
                    queue_p99_ms=s.queue_p99_ms,
                    e2e_p99_ms=s.e2e_p99_ms,
                    diagnosis="no_scaler" if d is None else d.diagnosis,
                )
            )

    def _write(self, decision: Decision, signals: Sequence[GroupSignals], now: float) -> None:
        """The tick's decision records, left out and read back as the live scaler's are
        (`ScalerService._publish`; the read is the JSON the broker returns), each group's
        memory in them every `CHECKPOINT_EVERY_S` (`scaler/checkpoint.py`)."""
        checkpoints = None
        if checkpoint_due(now, self.checkpoint_at):
            got = tick_checkpoints(
                self.state, signals, policy=self.policy_name, config=config_digest(self.config)
            )
            checkpoints = None if isinstance(got, str) else got
        for s, d in zip(signals, decision.groups, strict=True):
            said = what_it_says(d, applied=True, error=None, acting=True)
            last = self.written.get(s.group)
            checkpoint = None if checkpoints is None else checkpoints[s.group]
            if checkpoint is not None or worth_writing(
                said, s, last, now=now, idle_every_s=IDLE_HOLD_EVERY_S
            ):
                record = decision_record(
                    d,
                    policy=self.policy_name,
                    at=now,
                    tick_at=now,
                    signals=s,
                    checkpoint=checkpoint,
                )
                self.records.append(json.loads(json.dumps(record)))
                self.written[s.group] = Written(said, now, s)
        if checkpoints is not None:
            self.checkpoint_at = now

    def _recalls(self) -> bool:
        """The restart to come replays decision records: they are written until then."""
        return self.params.scaler_recall and not self.params.scaler_restart_keeps_memory

    def _restarted(self, now: float) -> ScalerState:
        """A new scaler process's memory: its records replayed (`scaler/recall.py`), or none
        (or, the reference, the memory the scaler had: a pause, not a new process)."""
        if self.params.scaler_restart_keeps_memory:
            return self.state
        if not self.params.scaler_recall:
            return ScalerState()
        recalled = recall(
            self.records,
            self.policy,
            self.config,
            since=now - replay_span_s(self.config),
            until=now,
            interval_s=self.params.collection_interval_s,
            idle_every_s=IDLE_HOLD_EVERY_MAX_S,
            policy_name=self.policy_name,
        )
        self.records.clear()
        return to_resume(recalled.state)

    def _joins(self, gi: int, now: float) -> bool:
        """A readiness event only rebalances if its replica still consumes from then."""
        return any(
            r.consume_from == now and r.ready_at <= now and r.gone_at is None and not r.leaving
            for r in self.groups[gi].replicas
        )

    def _apply(self, decision: Decision, now: float) -> None:
        """Releases first (they free GPUs), then starts round-robin within the cluster.

        The actuator's contract for standby: it keeps `desired + standby` workers; a missing
        consumer is a warm standby promoted first (it consumes after `standby_promote_s`),
        then a standby still warming, then a cold start; a surplus consumer becomes a standby
        while standby is short, else it stops.
        """
        wants: dict[int, list[bool]] = {}
        for gi, (g, d) in enumerate(zip(self.groups, decision.groups, strict=True)):
            if d.desired != len(g.consuming_role()) or d.standby != len(g.standby_role()):
                self.lines.append(f"t={now:7.0f}s {d.line()}")
                self.actions[gi] += 1
            wants[gi] = self._resize(gi, d.desired, d.standby, now)
        budget = self.params.max_total_replicas
        free = None if budget is None else budget - self.in_use(now)
        # A cluster without priorities: pending replicas are placed one group at a time,
        # consumers before standby.
        while any(wants.values()) and (free is None or free > 0):
            for gi, queue in wants.items():
                if not queue or (free is not None and free <= 0):
                    continue
                self._start(gi, now, standby=queue.pop(0))
                free = None if free is None else free - 1

    def _resize(self, gi: int, desired: int, standby: int, now: float) -> list[bool]:
        """Promote, demote and stop; returns the cold starts still needed (True = standby)."""
        g = self.groups[gi]
        consuming, spare = g.consuming_role(), g.standby_role()
        if desired > len(consuming):
            # Warm standby first, then the one closest to warm.
            spare.sort(key=lambda r: r.ready_at)
            for r in spare[: desired - len(consuming)]:
                self._promote(gi, r, now)
        elif desired < len(consuming):
            self._release(gi, len(consuming) - desired, max(0, standby - len(spare)), now)
        missing = max(0, desired - len(g.consuming_role()))
        spare = g.standby_role()
        if standby < len(spare):
            # Stop the ones still warming first (nothing spent on warming them is lost yet
            # that would not be lost anyway), then the newest.
            spare.sort(key=lambda r: (r.ready_at <= now, -r.started_at))
            for r in spare[: len(spare) - standby]:
                r.gone_at = now
        return [False] * missing + [True] * max(0, standby - len(spare))

    def _start(self, gi: int, now: float, *, standby: bool) -> None:
        ready_at = now + self.params.time_to_ready_s
        self.groups[gi].replicas.append(
            Replica(
                started_at=now,
                ready_at=ready_at,
                free_at=ready_at,
                consume_from=None if standby else ready_at,
            )
        )
        self.started[gi].append((now, ready_at))
        if not standby:
            self.push(ready_at, "ready", gi)

    def _promote(self, gi: int, r: Replica, now: float) -> None:
        """A standby consumes after the handover if warm, else once warm."""
        r.consume_from = max(r.ready_at, now + self.params.standby_promote_s)
        r.free_at = max(r.free_at, r.consume_from)
        self.push(r.consume_from, "ready", gi)

    def _release(self, gi: int, count: int, to_standby: int, now: float) -> None:
        """Drop `count` consumers: still starting first, newest first; some stay as standby."""
        g = self.groups[gi]
        victims = sorted(g.consuming_role(), key=lambda r: (_consuming(r, now), -r.started_at))
        for r in victims[:count]:
            if to_standby > 0:
                to_standby -= 1
                r.consume_from = None
            elif not _consuming(r, now):
                r.gone_at = now
            else:
                r.leaving = True
                r.gone_at = max(now, r.free_at)
        # The consumers' partitions move now; each stays paused until the batch its
        # previous owner has in flight is done, then for the handover.
        g.membership_changed(now)

    def outcome(self, horizon_s: float) -> tuple[GroupOutcome, ...]:
        out = []
        for gi, g in enumerate(self.groups):
            cost = sum(
                max(
                    0.0,
                    min(r.gone_at if r.gone_at is not None else horizon_s, horizon_s)
                    - r.started_at,
                )
                for r in g.replicas
            )
            out.append(
                GroupOutcome(
                    name=g.name,
                    tier=g.tier,
                    slo_p99_e2e_ms=self.params.slo_p99_e2e_ms[g.tier],
                    arrivals=g.times,
                    e2e_s=g.end_t - g.times,
                    replica_seconds=cost,
                    actions=self.actions[gi],
                    ready_times=tuple(self.started[gi]),
                )
            )
        return tuple(out)


def simulate(
    workload: Workload,
    params: SimParams,
    policy: str,
    config: PolicyConfig,
    progress: Progress | None = None,
) -> SimRun:
    """Run `policy` on `workload`; deterministic for a given workload and settings."""
    if policy not in POLICIES:
        raise KeyError(f"unknown policy {policy!r}; choose one of {sorted(POLICIES)}")
    params.check_span(workload.duration_s)
    started = time.perf_counter()
    loop = _Loop(workload, params, policy, config)
    loop.run(progress)
    return SimRun(
        policy=policy,
        groups=loop.outcome(workload.duration_s),
        ticks=tuple(loop.ticks),
        lines=tuple(loop.lines),
        wall_s=time.perf_counter() - started,
    )


def _consuming(r: Replica, now: float) -> bool:
    return r.consume_from is not None and r.consume_from <= now and r.ready_at <= now


def served_share(outcome: GroupOutcome) -> float:
    """Share of arrivals that got a result."""
    n = outcome.arrivals.size
    return 1.0 if n == 0 else float(np.count_nonzero(~np.isnan(outcome.e2e_s))) / n

"""The working record one group's decision is built in, step by step."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from scaler.decision import GroupDecision, Reason, reason_number
from scaler.signals import Diagnosis, GroupSignals, GroupState


@dataclass(frozen=True)
class CapHold:
    """Why the group keeps its cap (`cap_hold.py`): the load needed it within `hold_s`."""

    hold_s: float
    """`PolicyConfig.cap_hold_s`: how long after the load needed it the cap is kept."""
    cap: int
    """The most consumers the group can use (`guards.group_cap`)."""
    line: float
    """The load that needs the cap: `cap` x `target_utilization`, in busy replicas."""
    load: float
    """The highest load (busy replicas' worth) at or above `line` within the hold."""
    ago_s: float
    """How long ago the load was last at or above `line`."""
    longest_quiet_s: float
    """The longest gap the burst memory saw (`BurstMemory.longest_quiet_s`; 0: none yet)."""

    def text(self) -> str:
        """The clause a held scale-down's reason adds."""
        quiet = (
            f"the longest quiet stretch remembered is {reason_number(self.longest_quiet_s)} s"
            if self.longest_quiet_s > 0
            else "no quiet stretch is remembered yet"
        )
        return (
            f"{reason_number(self.load, 1)} busy replicas' worth, >= "
            f"{reason_number(self.line, 1)}, {reason_number(self.ago_s)} s ago; {quiet}"
        )


@dataclass(frozen=True)
class Plan:
    """A group's decision in the making; each policy step returns an updated copy."""

    signals: GroupSignals
    state: GroupState
    desired: int
    diagnosis: Diagnosis
    reasons: tuple[Reason, ...] = ()
    standby: int = 0
    """Warm standby replicas to keep beside `desired` (only where the signals report standby)."""
    warm_total: int = 0
    """Replicas wanted loaded in all (consuming + standby); standby tops `desired` up to it."""
    burst_floor: int = 0
    """Replicas the burst memory keeps for the next burst (0: it keeps none); while it does,
    the scale-down needs no long window after a step down: the floor is the hold."""
    floor_known: bool = False
    """The burst floor is a quantile of enough remembered bursts, not the highest of a few
    (`BurstMemory.knows_quantile`): only then it replaces the window after a step down."""
    release_to_floor: bool = False
    """The load is in a gap between bursts that rise slower than a keep cost (`hold.py`): the
    burst floor alone keeps what the next one needs before new capacity serves, so the
    scale-down to it waits out no hold window and no stale step up."""
    next_start_at_s: float | None = None
    """Bursts on a schedule (`hold.burst_due`): when what the next one needs is started for
    it, on the signals' clock (`collected_at`; at or before it once the start is asked
    for); None without a schedule, or once the burst it was started for failed to come. A
    scale-down window that ends before then buys nothing: the capacity is started again
    for that burst either way."""
    cap_hold: CapHold | None = None
    """The load needed the group's cap lately (`cap_hold.py`): the scale-down keeps the cap
    (`scale_down.py`)."""
    fresh: bool = True
    """False when the signals were stale or missing: nothing may scale down then."""

    @property
    def current(self) -> int:
        """Replicas the group has now, in any state."""
        return self.signals.replicas

    def with_(
        self,
        *,
        desired: int | None = None,
        diagnosis: Diagnosis | None = None,
        reason: Reason | None = None,
    ) -> Plan:
        """A copy with a new desired count, diagnosis and/or one more reason."""
        return dataclasses.replace(
            self,
            desired=self.desired if desired is None else desired,
            diagnosis=self.diagnosis if diagnosis is None else diagnosis,
            reasons=self.reasons if reason is None else (*self.reasons, reason),
        )

    def top_up_standby(self) -> Plan:
        """Standby = what `warm_total` asks beyond the final `desired` (none if no total)."""
        if not self.warm_total:
            return self
        return dataclasses.replace(self, standby=max(0, self.warm_total - self.desired))

    def to_decision(self) -> GroupDecision:
        """The finished decision."""
        return GroupDecision(
            group=self.signals.group,
            model=self.signals.model,
            tier=self.signals.tier,
            current=self.current,
            desired=self.desired,
            diagnosis=self.diagnosis,
            reasons=self.reasons,
            standby=self.standby,
            current_standby=self.signals.standby_replicas or 0,
        )


def direction(desired: int, current: int) -> Diagnosis:
    """The diagnosis a plain resize implies."""
    if desired > current:
        return "capacity_bound"
    if desired < current:
        return "over_provisioned"
    return "steady"


def known_numbers(s: GroupSignals) -> dict[str, float]:
    """What a group's signals do say, for a reason that sizes nothing from what they lack."""
    known = {
        "replicas": s.replicas,
        "ready_replicas": s.ready_replicas,
        "starting_replicas": s.starting_replicas,
        "arrival_rps": s.arrival_rps,
        "service_rps_per_replica": s.service_rps_per_replica,
        "lag": s.lag,
        "utilization": s.utilization,
    }
    return {name: value for name, value in known.items() if value is not None}

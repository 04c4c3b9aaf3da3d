"""The SLO policy's scale-down: up at once, down after a short hold, longer after a step down."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from scaler.config import PolicyConfig
from scaler.decision import Reason, reason_number
from scaler.policy.plan import Plan
from scaler.policy.rate import arrival_estimate
from scaler.policy.regret import judge, remember_scale_down


def stabilize_slo(plan: Plan, config: PolicyConfig, now: float) -> Plan:
    """Up at once; down to the highest recommendation over the hold, in one step.

    The hold (`scale_down_hold_s`, default the reaction time: the time-to-ready, at least two
    metrics windows, `PolicyConfig.reaction_s`) is the SLO policy's own
    window: with handovers that pause only the moved partitions a scale-down is cheap, and
    keeping a replica idle longer than it takes to start one again costs more than that.
    Bursts are kept by the burst memory (`hold.py`), not by a long window; in a gap between
    bursts that rise slower than a keep cost there is no hold at all, the floor being all
    the next one needs (`hold.release_to_floor`). After a load that needed the group's cap
    it keeps the cap for `cap_hold_s` (`cap_hold.py`). No scale-down
    before the hold has been observed, and none smaller than `scale_down_min_step_share`.
    """
    if not plan.fresh:
        return plan
    s, current = plan.signals, plan.current
    plan = dataclasses.replace(plan, state=judge(plan.state, plan.desired, current, config, now))
    hold = config.hold_s(s) * plan.state.hold_factor
    rate = arrival_estimate(plan, config)
    step_at = plan.state.last_step_down_at
    if rate is not None and rate.before_step is not None and rate.level < rate.before_step:
        step_at = rate.step_at if step_at is None else max(step_at, rate.step_at or step_at)
    dropped, skipped = _after_step_down(plan, config, step_at, now)
    if dropped:
        hold = max(hold, config.gap_hold_s(s))
    releasing = plan.release_to_floor and plan.desired >= plan.burst_floor
    # After a load that needed the cap a cold start has no spare to catch up with: the cap
    # stays for the cap hold (`cap_hold.py`), unless the floor is the whole hold.
    cap = plan.cap_hold
    if cap is not None and (releasing or cap.hold_s < hold):
        cap = None
    window_s = max(hold, config.gap_hold_s(s), cap.hold_s if cap is not None else 0.0)
    kept = (r for r in plan.state.recommendations if now - r[0] < window_s)
    window = (*kept, (now, plan.desired))
    state = dataclasses.replace(plan.state, recommendations=window, last_step_down_at=step_at)
    plan = dataclasses.replace(plan, state=state)
    if plan.desired >= current:
        return plan
    since = state.observed_since
    history = max(hold, config.forecast_window_s)
    if since is None or now - since < history:
        # A fresh scaler (or a restart) has not seen whether this is a dip or a trend.
        return plan.with_(
            desired=current,
            reason=Reason(
                "scale_down_waits_for_history",
                f"scale-down to {reason_number(plan.desired)} waits for "
                f"{reason_number(history)} s of history",
                {"wanted": plan.desired, "history_s": history},
            ),
        )
    if releasing:
        # In a gap between slow-rising bursts the floor is the hold (`hold.release_to_floor`).
        highest = plan.desired
    elif cap is not None:
        highest = cap.cap
    else:
        # A hold of 0 s (a time-to-ready of 0) holds nothing, not even this tick.
        highest = max((n for t, n in window if now - t < hold), default=plan.desired)
    target = min(current, max(plan.desired, highest))
    if target > plan.desired and cap is not None:
        plan = plan.with_(
            desired=target,
            reason=Reason(
                "scale_down_stabilized",
                f"scale-down to {reason_number(plan.desired)} held at {reason_number(target)} "
                f"(the cap {reason_number(cap.cap)}, kept {reason_number(cap.hold_s)} s after "
                f"the load needed it: {cap.text()})",
                {
                    "wanted": plan.desired,
                    "held": target,
                    "hold_s": cap.hold_s,
                    "cap": cap.cap,
                    "cap_load": cap.load,
                    "cap_needed_ago_s": cap.ago_s,
                },
            ),
        )
    elif target > plan.desired:
        after = " after a step down in arrivals" if dropped else ""
        if plan.state.hold_factor > 1 and not dropped:
            after += f", {reason_number(plan.state.hold_factor, 2)}x its base hold after regrets"
        if dropped and plan.burst_floor:
            after += f"; the burst floor {plan.burst_floor} is the highest of a few bursts"
        plan = plan.with_(
            desired=target,
            reason=Reason(
                "scale_down_stabilized",
                f"scale-down to {reason_number(plan.desired)} held at {reason_number(target)} "
                f"(highest recommendation in {reason_number(hold)} s{after})",
                {"wanted": plan.desired, "held": target, "hold_s": hold},
            ),
        )
    if target >= current:
        return plan
    step = max(1, math.ceil(config.scale_down_min_step_share * current - 1e-9))
    if current - target < step:
        return plan.with_(
            desired=current,
            reason=Reason(
                "scale_down_not_worth_rebalance",
                f"scale-down by {reason_number(current - target)} < step {step}: "
                "not worth a handover",
                {"wanted": target, "step": step},
            ),
        )
    if skipped is not None:
        held = max((n for t, n in window if now - t < skipped.hold_s), default=target)
        would_keep = min(current, held)
        if would_keep > target:
            plan = plan.with_(reason=skipped.reason(would_keep, s.collected_at))
    state = remember_scale_down(
        dataclasses.replace(plan.state, last_scale_down_at=now), target, now
    )
    return dataclasses.replace(plan, state=state)


@dataclass(frozen=True)
class _SkippedWindow:
    """The window after a step down, left out before a burst on a schedule."""

    hold_s: float
    ends_at_s: float
    start_at_s: float
    """When the next burst's capacity is started (`Plan.next_start_at_s`): at or after
    `ends_at_s`."""

    def reason(self, kept: int, now_s: float) -> Reason:
        """Said when the window would have kept more than the scale-down leaves."""
        return Reason(
            "scale_down_before_schedule",
            f"no window after the step down in arrivals (it would keep {reason_number(kept)} "
            f"for {reason_number(self.ends_at_s - now_s)} s more): the next burst on the "
            f"schedule gets its capacity started in {reason_number(self.start_at_s - now_s)}"
            " s, after it ends",
            {
                "window_kept": kept,
                "window_ends_in_s": self.ends_at_s - now_s,
                "next_start_in_s": self.start_at_s - now_s,
                "gap_hold_s": self.hold_s,
            },
        )


def _after_step_down(
    plan: Plan, config: PolicyConfig, step_at: float | None, now: float
) -> tuple[bool, _SkippedWindow | None]:
    """Whether the window after a step down in arrivals holds this tick, and the window
    when it was left out because a schedule starts the next burst's capacity after it ends.

    Idle between bursts is not idle for good: after a step down, keep what the load needed
    before it for a while (ski rental: about what a restart would cost). Not while the burst
    memory holds a floor for the next burst: that floor is the hold, and the window held the
    burst's own peak (forecast, backlog, fast path) through every gap shorter than it, so a
    bursty group never came down (on-off: 0.26x the oracle). A floor from the highest of a
    few bursts is no such hold yet: the next one exceeds it with probability 1 / (n + 1)
    (on-off: 4 800 late requests in the hour's 4th minute). Nor before a burst on a
    schedule whose capacity is started for it (`hold.burst_due`) only after the window
    ends: holding what the last one needed keeps it idle until the window stops it anyway
    (periodic x20: 0.13-0.19x of the oracle's replica-seconds, docs/benchmarks.md, stop 54).
    A start already asked for lies before the window's end: the window holds.
    """
    hold = config.gap_hold_s(plan.signals)
    floor_holds = plan.burst_floor > 0 and plan.floor_known
    if step_at is None or now - step_at >= hold or floor_holds:
        return False, None
    start_at = plan.next_start_at_s
    if start_at is None or start_at < step_at + hold:
        return True, None
    return False, _SkippedWindow(hold_s=hold, ends_at_s=step_at + hold, start_at_s=start_at)

"""Share one global replica budget over groups by tier priority: critical, interactive, batch."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from scaler.decision import Reason, reason_number
from scaler.policy.plan import Plan
from schemas.topics import TIERS


def _working(plan: Plan) -> int:
    """One replica for a group with work (a lag, or arrivals measured) that wants one: work
    waiting now comes before a floor kept for work that may come. Without this, a budget
    below the groups' count gave the idle higher tiers' floors everything, and a batch
    group with requests waiting never got a worker (its requests waited for good)."""
    s = plan.signals
    has_work = (s.lag or 0) > 0 or (s.arrival_rps or 0.0) > 0.0
    return min(plan.desired, 1) if has_work else 0


def _floor(plan: Plan) -> int:
    s = plan.signals
    return min(plan.desired, max(s.min_replicas, s.warm_replicas))


def _standby_first(plans: Sequence[Plan], budget: int) -> list[Plan]:
    """Standby counts against the budget but yields before any consumer, lowest tier first."""
    over = sum(p.desired + p.standby for p in plans) - budget
    out = list(plans)
    for i in sorted(range(len(out)), key=lambda i: -TIERS.index(out[i].signals.tier)):
        if over <= 0:
            break
        cut = min(over, out[i].standby)
        if cut:
            out[i] = dataclasses.replace(out[i], standby=out[i].standby - cut).with_(
                reason=Reason(
                    "budget_capped",
                    f"global budget {reason_number(budget)}: standby "
                    f"{reason_number(out[i].standby)} cut by {reason_number(cut)}",
                    {"budget": budget, "standby_cut": cut},
                )
            )
            over -= cut
    return out


def share_budget(plans: Sequence[Plan], budget: int | None) -> list[Plan]:
    """Grant one replica to each group with work, then floors, then the rest, each pass in
    tier priority, so batch yields first."""
    if budget is None or sum(p.desired + p.standby for p in plans) <= budget:
        return list(plans)
    plans = _standby_first(plans, budget)
    if sum(p.desired for p in plans) <= budget:
        return plans
    order = sorted(range(len(plans)), key=lambda i: TIERS.index(plans[i].signals.tier))
    granted = [0] * len(plans)
    left = budget
    # Pass 1 gives each group with work one replica; pass 2 keeps every group's floor
    # (min, warm) before any group grows beyond it; pass 3 hands the remainder out.
    for want in (_working, _floor, lambda p: p.desired):
        for i in order:
            extra = min(max(0, want(plans[i]) - granted[i]), left)
            granted[i] += extra
            left -= extra
    out: list[Plan] = []
    for plan, grant in zip(plans, granted, strict=True):
        if grant >= plan.desired:
            out.append(plan)
            continue
        out.append(
            dataclasses.replace(plan, standby=0).with_(
                desired=grant,
                diagnosis="budget_capped",
                reason=Reason(
                    "budget_capped",
                    f"global budget {reason_number(budget)}: granted {reason_number(grant)} of "
                    f"{reason_number(plan.desired)} "
                    "(groups with work first, then floors; lower tiers yield first)",
                    {"budget": budget, "wanted": plan.desired, "granted": grant},
                ),
            )
        )
    return out

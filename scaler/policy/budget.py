"""Share one global replica budget over groups by tier priority: critical, interactive, batch."""

from __future__ import annotations

from collections.abc import Sequence

from scaler.policy.plan import Plan
from scaler.signals import Reason
from schemas.topics import TIERS


def _floor(plan: Plan) -> int:
    s = plan.signals
    return min(plan.desired, max(s.min_replicas, s.warm_replicas))


def share_budget(plans: Sequence[Plan], budget: int | None) -> list[Plan]:
    """Grant floors first, then the rest, both in tier priority, so batch yields first."""
    if budget is None or sum(p.desired for p in plans) <= budget:
        return list(plans)
    order = sorted(range(len(plans)), key=lambda i: TIERS.index(plans[i].signals.tier))
    granted = [0] * len(plans)
    left = budget
    # Pass 1 keeps every group's floor (min, warm) before any group grows beyond it;
    # pass 2 hands the remainder out in priority order.
    for want in (_floor, lambda p: p.desired):
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
            plan.with_(
                desired=grant,
                diagnosis="budget_capped",
                reason=Reason(
                    "budget_capped",
                    f"global budget {budget}: granted {grant} of {plan.desired} "
                    "(lower tiers yield first)",
                    {"budget": budget, "wanted": plan.desired, "granted": grant},
                ),
            )
        )
    return out

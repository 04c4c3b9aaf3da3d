"""How the scaler sizes a rollout's canary groups (pure)."""

from __future__ import annotations

import dataclasses

from infra.models.config import ReplicaBounds
from scaler.signals import GroupDecision, GroupSignals, Reason
from schemas.topics import Lane


def lane_bounds(replicas: ReplicaBounds, lane: Lane, share: float) -> tuple[int, int, int]:
    """(min, max, warm) replicas of a group. Stable: model.yaml's `replicas`. Canary: at
    least one worker while it has a share (ingest routes to it only while one is ready),
    none required once it has none."""
    if lane == "stable":
        return replicas.min, replicas.max, replicas.warm
    if share > 0:
        return max(1, replicas.min), replicas.max, replicas.warm
    return 0, replicas.max, 0


def settle_canary(
    decision: GroupDecision, signals: GroupSignals | None, lane: Lane, share: float
) -> GroupDecision:
    """A canary group whose share is gone (rolled back, promoted, removed): one worker until
    its queue is empty (what was routed before is still answered), then none at once (the
    scale-down window would keep idle workers for minutes)."""
    if lane != "canary" or share > 0:
        return decision
    drained = signals is not None and not signals.stale and signals.lag == 0
    if drained:
        if decision.desired == 0 and decision.standby == 0:
            return decision
        return dataclasses.replace(
            decision,
            desired=0,
            standby=0,
            diagnosis="idle",
            reasons=(
                *decision.reasons,
                Reason(
                    "canary_retired",
                    f"canary has no share and an empty queue: {decision.desired} -> 0",
                    {"wanted": decision.desired},
                ),
            ),
        )
    if decision.desired >= 1:
        return decision
    lag = signals.lag if signals is not None else None
    return dataclasses.replace(
        decision,
        desired=1,
        reasons=(
            *decision.reasons,
            Reason(
                "canary_draining",
                f"canary has no share but {lag if lag is not None else 'an unknown'} queued "
                "request(s): one worker answers them",
                {"lag": float(lag)} if lag is not None else {},
            ),
        ),
    )

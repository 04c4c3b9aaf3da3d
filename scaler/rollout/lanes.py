"""How the scaler sizes a rollout's canary groups (pure)."""

from __future__ import annotations

import dataclasses

from infra.models.config import ReplicaBounds
from scaler.decision import GroupDecision, Reason
from scaler.signals import GroupSignals
from schemas.topics import Lane

RETIRE_GRACE_S = 15.0
"""A canary group keeps a worker this long after its share went to 0: ingest reads a
decision within a poll and a model.yaml edit within INFERBUS_INGEST_MODEL_REFRESH_S (5 s),
and may route a last few requests to the canary until then."""


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
    decision: GroupDecision,
    signals: GroupSignals | None,
    lane: Lane,
    share: float,
    *,
    no_share_for_s: float,
    grace_s: float = RETIRE_GRACE_S,
) -> GroupDecision:
    """A canary group whose share is gone (rolled back, promoted, removed) for
    `no_share_for_s`: one worker while ingest may still route to it (`grace_s`) and until its
    queue is empty (what was routed is still answered), then none at once (the scale-down
    window would keep idle workers for minutes)."""
    if lane != "canary" or share > 0:
        return decision
    drained = signals is not None and not signals.stale and signals.lag == 0
    if drained and no_share_for_s < grace_s:
        if decision.desired >= 1 or decision.current == 0:
            return decision  # none running: ingest routes to none
        return dataclasses.replace(
            decision,
            desired=1,
            reasons=(
                *decision.reasons,
                Reason(
                    "canary_grace",
                    f"canary has no share since {no_share_for_s:.0f} s: one worker for "
                    f"{grace_s:.0f} s while ingest may still route to it",
                    {"no_share_for_s": no_share_for_s, "grace_s": grace_s},
                ),
            ),
        )
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

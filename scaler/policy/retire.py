"""A group its model no longer wants (the model left the repository, or the tier its
model.yaml): no new worker starts for it, the live ones answer what is queued, then none."""

from __future__ import annotations

import dataclasses

from scaler.decision import GroupDecision, Reason
from scaler.signals import GroupSignals


def settle_retiring(
    decision: GroupDecision, signals: GroupSignals | None, why: str
) -> GroupDecision:
    """The policy's `decision` for a retiring group, bounded: never more workers than are
    live (one could not load the model), at least one while requests wait for them, none
    once nothing is queued or nobody is left to answer."""
    live = 0 if signals is None else signals.replicas
    queued = 0 if signals is None or signals.lag is None else signals.lag
    if live > 0 and queued > 0:
        desired = max(1, min(decision.desired, live))
        said = f"{why}: {live} worker(s) answer the {queued} queued; no new one starts"
    elif queued > 0:
        desired = 0
        said = (
            f"{why}: no worker is left and none can start for it: its {queued} queued "
            "request(s) get an error result from the scaler (unless it only advises)"
        )
    else:
        desired = 0
        said = f"{why}: nothing queued: its workers stop"
    return dataclasses.replace(
        decision,
        desired=desired,
        standby=0,
        diagnosis=decision.diagnosis if desired else "idle",
        reasons=(
            *decision.reasons,
            Reason("retiring", said, {"live": live, "queued": queued}),
        ),
    )

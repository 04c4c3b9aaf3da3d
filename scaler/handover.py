"""A clean stop of a scaler whose workers are its own children (the local actuator) hands
its groups over: it releases the lease, and its workers serve until the scaler that took it
has as many of its own ready in each group, so that no group goes unserved for a worker's
start (docs/reliability.md, "Stop 59").

The next holder's workers find each group's count met by these and wait as warm standby;
when these stop, the standbys consume at once (as after a holder that was frozen).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Protocol

from infra.registry import RegistryTable, is_live
from scaler.lease import LeaseView

log = logging.getLogger(__name__)

CLAIM_WAIT_S = 2.0
"""How long a stop waits for another scaler to take the released lease (a standby takes
it in about 0.1 s) before it stops its workers: with no standby there is nobody to hand
over to."""
HANDOVER_LIMIT_S = 30.0
"""Most seconds a stop keeps its workers for the next holder's (a local worker starts in
5-13 s on 2 cores); then they stop whatever is ready, and the groups still waiting are
said."""
POLL_S = 0.25


def waiting_groups(
    table: RegistryTable, ours: Mapping[str, frozenset[str]], now: datetime
) -> dict[str, tuple[int, int]]:
    """The groups where fewer live, ready workers that are not `ours` (consuming or
    standing by) serve than ours that are ready: group -> (theirs ready, ours ready). Ours
    still starting serve nobody yet, and nobody needs to replace them."""
    waiting = {}
    for group, mine in ours.items():
        ready = [
            record
            for record in table.instances.values()
            if (record.group == group or group in record.groups)
            and record.state == "ready"
            and is_live(record, now)
        ]
        ours_ready = sum(1 for record in ready if record.instance_id in mine)
        theirs = len(ready) - ours_ready
        if theirs < ours_ready:
            waiting[group] = (theirs, ours_ready)
    return waiting


class Releasing(Protocol):
    """The lease, as a handover uses it (`scaler.lease_keeper.LeaseKeeper`)."""

    view: LeaseView

    async def release(self) -> int | None: ...

    async def taken_after(self, term: int, within_s: float) -> str | None: ...


async def hand_over(
    lease: Releasing,
    ours: Mapping[str, frozenset[str]],
    table: Callable[[], RegistryTable],
    *,
    claim_wait_s: float = CLAIM_WAIT_S,
    limit_s: float = HANDOVER_LIMIT_S,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Release the lease and return once the scaler that took it has its workers ready
    where `ours` (group -> this scaler's worker instance ids) serve, or at `limit_s`; at
    once where nobody took the lease within `claim_wait_s`. `table`: the registry now."""
    term = await lease.release()
    if term is None or not any(ours.values()):
        return
    holder = await lease.taken_after(term, claim_wait_s)
    if holder is None:
        log.info(
            "event=handover_none why='no scaler took the lease within %.0f s: the workers "
            "stop now'",
            claim_wait_s,
        )
        return
    log.info("event=handing_over to=%s groups=%d limit_s=%.0f", holder, len(ours), limit_s)
    started = clock()
    while waiting := waiting_groups(table(), ours, datetime.now(UTC)):
        gone = lease.view.holder != holder
        if gone or clock() - started >= limit_s:
            shown = " ".join(f"{g}={t}/{o}" for g, (t, o) in sorted(waiting.items()))
            log.warning(
                "event=handover_cut to=%s after_s=%.1f why=%r waiting=%s (its workers ready "
                "/ ours: these stop now)",
                holder,
                clock() - started,
                "it no longer holds the lease" if gone else f"the {limit_s:.0f} s limit",
                shown,
            )
            return
        await asyncio.sleep(POLL_S)
    log.info("event=handed_over to=%s after_s=%.1f", holder, clock() - started)

"""What the kill scenarios share: paced requests, and one process killed with SIGKILL among them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from infra.tasks import cancel_and_wait
from schemas.topics import Tier
from services.chaos.harness import ChaosError
from services.chaos.scenarios.base import Run


@dataclass(frozen=True)
class KillSizes:
    """A kill under load: the load's rate and length, and when the kill comes."""

    rate_rps: float
    duration_s: float
    kill_at_s: float
    timeout_s: float
    """Each request's deadline, seconds after it is sent."""


@dataclass(frozen=True)
class Kill:
    """The process a scenario killed, and when."""

    pid: int
    at_s: float
    """Wall clock of the kill, epoch seconds."""
    workers_before: frozenset[str]
    """Workers that had sent a result before the kill."""


async def kill_under_load(
    r: Run,
    tier: Tier,
    sizes: KillSizes,
    *,
    what: str,
    pids: Callable[[], list[int]],
    missing: str,
) -> Kill:
    """Send `tier` requests (phase `before`, then `after` the kill), `kill -9` the first of
    `pids()` `kill_at_s` in, and return once all are sent.

    ChaosError (`missing`, and where the logs are) when there is no process to kill.
    """
    killed_at: float | None = None
    load = r.paced_valid(
        tier,
        rate_rps=sizes.rate_rps,
        duration_s=sizes.duration_s,
        timeout_s=sizes.timeout_s,
        phase=lambda: "before" if killed_at is None else "after",
    )
    await asyncio.sleep(sizes.kill_at_s)
    found = pids()
    if not found:
        await cancel_and_wait(load)
        raise ChaosError(f"{missing}; see {r.log_dir}")
    pid = found[0]
    before = frozenset(s.worker_id for s in r.observer.seen if s.worker_id is not None)
    killed_at = time.time()
    r.stack.kill(pid)
    r.say(f"killed {what} pid {pid} with SIGKILL")
    await load
    return Kill(pid, killed_at, before)

"""`inferbus scaler run`: the scaler as a long-running service with a chosen actuator."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import uuid
from pathlib import Path

from infra.processes import StopDeadline
from infra.tasks import cancel_and_wait
from scaler.actuators.base import Actuator
from scaler.actuators.factory import choose_kind, make_actuator
from scaler.actuators.local import LocalActuator
from scaler.collector.collector import CollectorConfig
from scaler.config import PolicyConfig
from scaler.handover import hand_over
from scaler.lease_keeper import LeaseKeeper
from scaler.service import ScalerService
from scaler.settings import ScalerSettings
from tracing.health import HEALTH
from tracing.metrics import set_acting, start_metrics_server
from tracing.setup import init_tracing, shutdown_tracing

log = logging.getLogger(__name__)

STOP_LIMIT_S = 10.0
"""Most seconds a stop waits on the broker, all steps together: the tick in progress, then
the disconnects. With the broker away each decision record of a tick waited the Kafka
client's 30 s request timeout, one group after another: a stop took minutes."""


async def tick_until(
    stop: asyncio.Event, ticking: asyncio.Task[None], *, cut: asyncio.Event | None = None
) -> StopDeadline | None:
    """Wait for `stop` (or `ticking` to end, its error raised); then give the tick in progress
    until the stop's deadline, which is returned for the rest of the stop. `cut` (the lease
    lost meanwhile) ends that tick at once: another scaler may act soon."""
    await _ends_or(ticking, stop)
    if ticking.done():
        ticking.result()
        return None
    deadline = StopDeadline("scaler", STOP_LIMIT_S)
    await deadline.step(
        "tick_in_progress",
        ticking if cut is None else _unless_cut(ticking, cut),
        "the rest of this tick's decisions and their records",
    )
    return deadline


async def _ends_or(ticking: asyncio.Task[None], *events: asyncio.Event) -> None:
    """Wait until `ticking` ends or one of `events` is set."""
    waits = [asyncio.create_task(event.wait()) for event in events]
    try:
        await asyncio.wait({ticking, *waits}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()


async def _unless_cut(ticking: asyncio.Task[None], cut: asyncio.Event) -> None:
    """`ticking` to its end, or cancelled when `cut` is set first."""
    await _ends_or(ticking, cut)
    if ticking.done():
        ticking.result()
        return
    log.warning("event=tick_cut why='the lease was lost while the stop waited on it'")
    await cancel_and_wait(ticking)


async def run_scaler(
    bootstrap: str,
    models_dir: Path,
    settings: ScalerSettings,
    *,
    worker_grace_s: float | None = None,
) -> None:
    """Collect → decide → act every interval until SIGTERM/SIGINT. `worker_grace_s`: how
    long a local scale-in waits for a worker's stop (`WorkerSettings.stop_grace_s`).

    With a lease (`settings.lease_s`, not a dry run) the scaler acts only while it holds
    it (`scaler/lease.py`): it waits as a standby while another scaler holds it, and one
    that loses it stops acting and waits again; each time it takes the lease it starts
    afresh, its memory recalled from the decision records."""
    kind = choose_kind(settings.actuator, os.environ)
    config = PolicyConfig(
        max_total_replicas=settings.max_total_replicas,
        scale_down_window_s=settings.scale_down_window_s,
    )

    def new_service() -> ScalerService:
        # An actuator a term: the local one's workers are this process's children, and
        # one that stands down stops them (the next holder starts its own).
        actuator = make_actuator(
            kind,
            bootstrap=bootstrap,
            models_dir=models_dir,
            namespace=settings.namespace,
            compose_file=settings.compose_file,
            compose_project=settings.compose_project,
            compose_project_dir=settings.compose_project_dir,
            worker_grace_s=worker_grace_s,
        )
        return ScalerService(
            bootstrap,
            models_dir,
            actuator,
            policy=settings.policy,
            config=config,
            collector_config=CollectorConfig(interval_s=settings.interval_s),
            act=not settings.dry_run,
            idle_hold_every_s=settings.idle_hold_every_s,
            recall_timeout_s=settings.recall_timeout_s,
        )

    # Unique per process: in containers every scaler may be pid 1 on the same host name.
    instance_id = f"scaler-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    init_tracing("inferbus-scaler", instance_id=instance_id)
    start_metrics_server(settings.metrics_port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    signals = 0

    def on_signal() -> None:  # as ingest and the workers: a second signal exits at once
        nonlocal signals
        signals += 1
        if signals > 1:
            log.warning("event=second_signal exit=now")
            os._exit(1)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    lease = None
    if settings.lease_s > 0 and not settings.dry_run:
        lease = LeaseKeeper(bootstrap, holder=instance_id, lease_s=settings.lease_s)
    acting: list[ScalerService] = []
    beat = HEALTH.serve(lambda: _readiness(acting, lease))
    try:
        if lease is not None:
            await lease.start()
        while not stop.is_set():
            if lease is not None and (not await lease.acquire(stop) or stop.is_set()):
                break
            acting.append(new_service())
            set_acting(not settings.dry_run)
            try:
                await _act(acting[0], stop, lease, kind, settings.policy)
            finally:
                set_acting(False)
                await acting.pop().actuator.close()
            if not stop.is_set():
                log.warning("event=scaler_stood_down (it lost the lease; it waits to take it)")
    finally:
        beat.cancel()
        if lease is not None:
            await lease.release()
            await lease.close()
        shutdown_tracing()


def _readiness(acting: list[ScalerService], lease: LeaseKeeper | None) -> tuple[bool, str]:
    """The acting service's readiness; a standby is ready to take over."""
    if acting:
        return acting[0].readiness()
    if lease is None:
        return False, "starting"
    holder = lease.view.holder
    return True, f"standby: {holder} acts" if holder else "standby: taking the lease"


async def _act(
    service: ScalerService, stop: asyncio.Event, lease: LeaseKeeper | None, kind: str, policy: str
) -> None:
    """Run `service` until `stop`, or until the lease is lost: then the tick in progress is
    cut at once (another scaler may act soon), not given the stop's time to finish. A
    clean stop of a holder whose workers stop with it hands its groups over first
    (`scaler/handover.py`)."""
    ticking: asyncio.Task[None] | None = None
    deadline: StopDeadline | None = None
    try:
        await service.start()
        log.info(
            "event=scaler_started actuator=%s policy=%s groups=%s",
            kind,
            policy,
            ",".join(service.collector.groups),
        )
        ticking = asyncio.create_task(service.run(stop), name="scaler-ticks")
        lost = None if lease is None else lease.lost
        if lost is not None and await _lost_first(ticking, stop, lost):
            # Cut, not given the stop's time: another scaler may act soon.
            deadline = StopDeadline("scaler", STOP_LIMIT_S)
            await deadline.step("tick_cut", cancel_and_wait(ticking), "the cut tick's end")
        else:
            deadline = await tick_until(stop, ticking, cut=lost)
            ours = own_workers(service.actuator)
            if lease is not None and stop.is_set() and not lease.lost.is_set() and ours:
                # A clean stop: the next holder's workers get ready before these stop.
                set_acting(False)  # it releases the lease first
                await hand_over(lease, ours, lambda: service.registry.table)
                if deadline is None:
                    deadline = StopDeadline("scaler", STOP_LIMIT_S)
                else:
                    deadline.restart(STOP_LIMIT_S, "handover")  # the disconnects' own time
    finally:
        if ticking is not None:
            ticking.cancel()
        if deadline is None:
            await service.close()
        else:
            await deadline.step("disconnect", service.close(), "a clean disconnect")
    gave_up = None if deadline is None else deadline.gave_up
    log.info("event=scaler_stopped gave_up=%s", gave_up or "nothing")


async def _lost_first(
    ticking: asyncio.Task[None], stop: asyncio.Event, lost: asyncio.Event
) -> bool:
    """Wait until the ticks end, a stop is asked for or the lease is lost; True where the
    lease was lost first."""
    await _ends_or(ticking, stop, lost)
    return lost.is_set() and not stop.is_set() and not ticking.done()


def own_workers(actuator: Actuator) -> dict[str, frozenset[str]]:
    """Group -> instance ids of the workers that are this process's children (the local
    actuator's), which stop with it; none for an actuator whose workers outlive it."""
    if not isinstance(actuator, LocalActuator):
        return {}
    return {g: frozenset(actuator.instance_ids(g).values()) for g in actuator.groups()}

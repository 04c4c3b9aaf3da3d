"""`inferbus scaler run`: the scaler as a long-running service with a chosen actuator."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from pathlib import Path

from infra.processes import StopDeadline
from scaler.actuators.factory import choose_kind, make_actuator
from scaler.collector.collector import CollectorConfig
from scaler.config import PolicyConfig
from scaler.service import ScalerService
from scaler.settings import ScalerSettings
from tracing.health import HEALTH
from tracing.metrics import start_metrics_server
from tracing.setup import init_tracing, shutdown_tracing

log = logging.getLogger(__name__)

STOP_LIMIT_S = 10.0
"""Most seconds a stop waits on the broker, all steps together: the tick in progress, then
the disconnects. With the broker away each decision record of a tick waited the Kafka
client's 30 s request timeout, one group after another: a stop took minutes."""


async def tick_until(stop: asyncio.Event, ticking: asyncio.Task[None]) -> StopDeadline | None:
    """Wait for `stop` (or `ticking` to end, its error raised); then give the tick in progress
    until the stop's deadline, which is returned for the rest of the stop."""
    stopping = asyncio.create_task(stop.wait(), name="stop-requested")
    try:
        await asyncio.wait({ticking, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
    if ticking.done():
        ticking.result()
        return None
    deadline = StopDeadline("scaler", STOP_LIMIT_S)
    await deadline.step(
        "tick_in_progress", ticking, "the rest of this tick's decisions and their records"
    )
    return deadline


async def run_scaler(
    bootstrap: str,
    models_dir: Path,
    settings: ScalerSettings,
    *,
    worker_grace_s: float | None = None,
) -> None:
    """Collect → decide → act every interval until SIGTERM/SIGINT. `worker_grace_s`: how
    long a local scale-in waits for a worker's stop (`WorkerSettings.stop_grace_s`)."""
    kind = choose_kind(settings.actuator, os.environ)
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
    config = PolicyConfig(
        max_total_replicas=settings.max_total_replicas,
        scale_down_window_s=settings.scale_down_window_s,
    )
    service = ScalerService(
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
    init_tracing("inferbus-scaler", instance_id=f"scaler-{os.getpid()}")
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
    beat = HEALTH.serve(service.readiness)
    await service.start()
    log.info(
        "event=scaler_started actuator=%s policy=%s groups=%s",
        kind,
        settings.policy,
        ",".join(service.collector.groups),
    )
    ticking = asyncio.create_task(service.run(stop), name="scaler-ticks")
    deadline: StopDeadline | None = None
    try:
        deadline = await tick_until(stop, ticking)
    finally:
        ticking.cancel()
        beat.cancel()
        if deadline is None:
            await service.close()
        else:
            await deadline.step("disconnect", service.close(), "a clean disconnect")
        await actuator.close()
        shutdown_tracing()
    if deadline is not None:
        log.info("event=scaler_stopped gave_up=%s", deadline.gave_up or "nothing")

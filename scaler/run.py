"""`inferbus scaler run`: the scaler as a long-running service with a chosen actuator."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from pathlib import Path

from scaler.actuators.factory import choose_kind, make_actuator
from scaler.collector.collector import CollectorConfig
from scaler.config import PolicyConfig
from scaler.service import ScalerService
from scaler.settings import ScalerSettings
from tracing.health import HEALTH
from tracing.metrics import start_metrics_server
from tracing.setup import init_tracing, shutdown_tracing

log = logging.getLogger(__name__)


async def run_scaler(bootstrap: str, models_dir: Path, settings: ScalerSettings) -> None:
    """Collect → decide → act every interval until SIGTERM/SIGINT."""
    kind = choose_kind(settings.actuator, os.environ)
    actuator = make_actuator(
        kind,
        bootstrap=bootstrap,
        models_dir=models_dir,
        namespace=settings.namespace,
        compose_file=settings.compose_file,
        compose_project=settings.compose_project,
        compose_project_dir=settings.compose_project_dir,
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
    )
    init_tracing("inferbus-scaler", instance_id=f"scaler-{os.getpid()}")
    start_metrics_server(settings.metrics_port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    beat = HEALTH.serve(service.readiness)
    await service.start()
    log.info(
        "event=scaler_started actuator=%s policy=%s groups=%s",
        kind,
        settings.policy,
        ",".join(service.collector.groups),
    )
    try:
        await service.run(stop)
    finally:
        beat.cancel()
        await service.close()
        await actuator.close()
        shutdown_tracing()

"""`inferbus bench idle`: what an idle `inferbus up` costs, and what its first request waits.

Starts the stack exactly as `inferbus up` does (embedded broker, ingest, one worker per
model and tier, the scaler), lets it settle, measures each process's CPU over a quiet
window from the kernel's counters, then sends single requests after quiet gaps: the price
of the long fetch waits an idle consumer uses.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from infra.cores import usable_cores
from schemas.topics import Tier
from services.bench.cpu import machine_busy_s, process_cpu
from services.bench.stats import percentiles
from services.bench.throughput import BenchFailed
from services.cli.stack import Stack, StackOptions
from services.client import InferenceClient

Progress = Callable[[str], None]
PROBED_TIERS: tuple[Tier, ...] = ("interactive", "batch")


@dataclass(frozen=True)
class IdleOptions:
    """What to measure."""

    settle_s: float = 40.0
    """Seconds after start before measuring (workers load, partitions settle)."""
    window_s: float = 60.0
    """Seconds of measured quiet."""
    gaps_s: tuple[float, ...] = (5.0, 40.0)
    """Quiet gaps before the probe requests: shortly idle, and long asleep."""
    probes: int = 3
    """Single requests sent after each gap."""


def _stack_pids(stack: Stack) -> dict[str, int]:
    pids: dict[str, int] = {"inferbus-up": os.getpid()}
    if stack.broker is not None and stack.broker.pid is not None:
        pids["broker"] = stack.broker.pid
    if stack.ingest is not None:
        for child in stack.ingest.children:
            if child.pid is not None:
                pids[child.name] = child.pid
    if stack.actuator is not None:
        for group in stack.actuator.groups():
            for i, pid in enumerate(stack.actuator.pids(group)):
                pids[f"{group.removeprefix('inferbus.workers.')}-{i}"] = pid
    return pids


async def _probe(bootstrap: str, gap_s: float, count: int) -> dict[Tier, list[float]]:
    """e2e ms of single demo-mlp requests after `gap_s` of quiet: an interactive one, then
    a batch one (batch lanes sleep deeper: `fetch_wait_asleep_batch_ms`)."""
    x = np.linspace(0, 1, 16, dtype=np.float32).reshape(1, 16)
    out: dict[Tier, list[float]] = {tier: [] for tier in PROBED_TIERS}
    async with InferenceClient(bootstrap) as client:
        for _ in range(count):
            await asyncio.sleep(gap_s)
            for tier in PROBED_TIERS:
                started = time.perf_counter()
                request = client.build_request("demo-mlp", {"x": x}, tier=tier)
                result = await client.infer(request, timeout_s=30)
                if not result.ok:
                    raise BenchFailed(
                        f"probe request ({tier}) failed: {result.status} {result.error}"
                    )
                out[tier].append((time.perf_counter() - started) * 1000)
    return out


async def bench_idle(options: IdleOptions, progress: Progress) -> dict[str, Any]:
    """Run the stack, measure it idle, probe it; returns the JSON report."""
    work = Path(tempfile.mkdtemp(prefix="inferbus-bench-idle-"))
    stack = Stack(
        StackOptions(
            bootstrap=None,
            models_dir=work / "models",
            workers_per_group=1,
            headless=True,
            duration_s=None,
            with_scaler=True,
            tiers=None,
            broker_port=0,
            log_dir=work / "logs",
        )
    )
    stop = asyncio.Event()
    try:
        bootstrap = await stack.start()
        assert stack.scaler is not None
        scaler = asyncio.create_task(stack.scaler.run(stop))
        progress(f"stack up on {bootstrap}; settling {options.settle_s:.0f}s")
        await asyncio.sleep(options.settle_s)
        pids = _stack_pids(stack)
        before = {name: process_cpu(pid) for name, pid in pids.items()}
        machine = machine_busy_s()
        progress(f"measuring {len(pids)} processes idle for {options.window_s:.0f}s")
        await asyncio.sleep(options.window_s)
        cores: dict[str, float] = {}
        for name, pid in pids.items():
            now, then = process_cpu(pid), before.get(name)
            if now is not None and then is not None:
                cores[name] = round((now.total_s - then.total_s) / options.window_s, 4)
        machine_cores = (machine_busy_s() - machine) / options.window_s
        probes: dict[Tier, dict[str, Any]] = {tier: {} for tier in PROBED_TIERS}
        for gap in options.gaps_s:
            progress(
                f"probe: {options.probes} x (interactive, batch) requests, each after "
                f"{gap:.0f}s quiet"
            )
            by_tier = await _probe(bootstrap, gap, options.probes)
            for tier, latencies in by_tier.items():
                probes[tier][f"after_{gap:.0f}s"] = {
                    "e2e_ms": [round(v, 1) for v in latencies],
                    **percentiles(latencies),
                }
        stop.set()
        await scaler
    finally:
        stop.set()
        await stack.close()
    return {
        "benchmark": "idle",
        "cores": usable_cores(),
        "window_s": options.window_s,
        "inferbus_cores_busy": round(sum(cores.values()), 4),
        "machine_cores_busy": round(machine_cores, 4),
        "by_process_cores": cores,
        "first_request_after_quiet": probes["interactive"],
        "first_batch_request_after_quiet": probes["batch"],
        "note": "machine_cores_busy includes anything else running on the machine",
    }

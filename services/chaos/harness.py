"""The embedded stack under test, and the faults: kill a process, restart the broker."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from infra.broker import EmbeddedBroker
from infra.processes import process_rss_bytes
from infra.tasks import wait_ended
from schemas.errors import InferbusError
from schemas.topics import Tier, worker_group
from services.chaos.model import MODEL, SimModel, write_model
from services.cli.stack import Stack, StackOptions

log = logging.getLogger(__name__)


class ChaosError(InferbusError):
    """The harness could not set up or inject a fault (not a finding about the stack)."""


@dataclass(frozen=True)
class StackPlan:
    """What a scenario runs: the served model, its tiers, the scaler, workers per tier."""

    model: SimModel
    tiers: tuple[Tier, ...] = ("interactive",)
    with_scaler: bool = True
    workers: int = 1


def rss_mb(pid: int) -> float | None:
    """A process's resident memory from /proc, MB; None when it is gone."""
    rss = process_rss_bytes(pid)
    return None if rss is None else rss / 2**20


def started_at(pid: int) -> float | None:
    """When a process started, epoch seconds (from /proc); None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        uptime_s = float(Path("/proc/uptime").read_text().split()[0])
    except OSError:
        return None
    # Field 22 of stat (the 20th after the command's closing parenthesis): clock ticks
    # after boot; /proc/uptime places boot to 10 ms (btime in /proc/stat only to 1 s).
    return time.time() - uptime_s + int(fields[19]) / os.sysconf("SC_CLK_TCK")


class ChaosStack:
    """`inferbus up`'s Stack, started from code, with handles for the faults."""

    def __init__(self, plan: StackPlan, workdir: Path) -> None:
        self.plan = plan
        self.workdir = workdir
        self.log_dir = workdir / "logs"
        self.stack = Stack(
            StackOptions(
                bootstrap=None,
                models_dir=write_model(workdir / "models", plan.model),
                workers_per_group=plan.workers,
                headless=True,
                duration_s=None,
                with_scaler=plan.with_scaler,
                tiers=list(plan.tiers),
                broker_port=0,
                log_dir=self.log_dir,
            )
        )
        # The stack's own lines (broker port, stopping, requests left behind) are progress:
        # stderr, as the harness's; stdout carries only the reports.
        self.stack.console = Console(stderr=True)
        self._stop = asyncio.Event()
        self._scaler: asyncio.Task[None] | None = None
        self.scaler_failure: str | None = None
        """Why the scaler's loop ended before the stack was closed, if it did: a finding."""

    async def start(self) -> str:
        """Broker, topics, ingest, workers, and the scaler's loop; returns the bootstrap."""
        bootstrap = await self.stack.start()
        scaler = self.stack.scaler
        if scaler is None:
            raise ChaosError("the stack started without a scaler")
        self._scaler = asyncio.create_task(scaler.run(self._stop), name="chaos-scaler")
        return bootstrap

    async def close(self) -> None:
        """Stop the scaler's loop and everything the stack started; idempotent.

        A scaler loop that died during the scenario is kept in `scaler_failure` for the
        report, and the rest of the stack is still stopped.
        """
        self._stop.set()
        scaler, self._scaler = self._scaler, None
        if scaler is not None:
            try:
                await wait_ended(scaler)
            except Exception as exc:  # the stack under test failed: reported, not raised
                self.scaler_failure = f"{type(exc).__name__}: {exc}"
                log.warning("event=chaos_scaler_loop_died error=%r", exc)
        await self.stack.close()

    @property
    def bootstrap(self) -> str:
        if self.stack.bootstrap is None:
            raise ChaosError("the stack is not started")
        return self.stack.bootstrap

    @staticmethod
    def group(tier: Tier) -> str:
        return worker_group(MODEL, tier)

    def worker_pids(self, tier: Tier) -> list[int]:
        actuator = self.stack.actuator
        return actuator.pids(self.group(tier)) if actuator is not None else []

    def worker_instance_id(self, tier: Tier, pid: int) -> str | None:
        """The instance id a running worker answers as (results' `worker_id`)."""
        actuator = self.stack.actuator
        return actuator.instance_ids(self.group(tier)).get(pid) if actuator is not None else None

    def ingest_pids(self) -> list[int]:
        """Running ingest processes, oldest first."""
        group = self.stack.ingest
        if group is None:
            return []
        return [c.pid for c in group.children if c.running and c.pid is not None]

    def ingest_rss_mb(self) -> float | None:
        """Resident memory of the (first) ingest process, MB."""
        pids = self.ingest_pids()
        return rss_mb(pids[0]) if pids else None

    def time_to_ready_s(self, tier: Tier) -> float | None:
        """The scaler's measured time-to-ready of a tier's workers, once it has one."""
        scaler = self.stack.scaler
        view = scaler.views.get(self.group(tier)) if scaler is not None else None
        signals = view.collection.signals if view is not None else None
        return signals.time_to_ready_s if signals is not None else None

    async def scale(self, tier: Tier, replicas: int, reason: str) -> None:
        """Set a tier's worker count by hand (the rebalance scenario, with the scaler off)."""
        actuator = self.stack.actuator
        if actuator is None:
            raise ChaosError("the stack has no actuator")
        await actuator.scale(self.group(tier), replicas, reason)

    @staticmethod
    def kill(pid: int) -> None:
        """`kill -9`: no drain, no deregistration."""
        os.kill(pid, signal.SIGKILL)
        log.info("event=chaos_killed pid=%d", pid)

    @staticmethod
    def freeze(pid: int) -> None:
        """SIGSTOP: the process holds on to everything and does nothing."""
        os.kill(pid, signal.SIGSTOP)
        log.info("event=chaos_frozen pid=%d", pid)

    @staticmethod
    def thaw(pid: int) -> None:
        """SIGCONT: a frozen process goes on (nothing if it is gone)."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
        log.info("event=chaos_thawed pid=%d", pid)

    async def stop_broker(self) -> int:
        """Stop the embedded broker (its memory-only log goes with it); returns its port."""
        broker = self.stack.broker
        if broker is None or broker.port is None:
            raise ChaosError("no embedded broker to stop")
        port = broker.port
        await asyncio.to_thread(broker.stop)
        return port

    async def start_broker(self, port: int) -> None:
        """A fresh broker on the same port, with no state, as a restarted Tansu would be."""
        broker = EmbeddedBroker(port=port)
        await asyncio.to_thread(broker.start)
        if broker.port != port:
            await asyncio.to_thread(broker.stop)
            raise ChaosError(f"port {port} was taken while the broker was down; got {broker.port}")
        # The stack's close() stops whatever broker it holds: this one now.
        self.stack.broker = broker

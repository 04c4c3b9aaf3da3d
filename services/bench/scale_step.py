"""`inferbus bench scale-step`: the live scaling loop under a load step, in one run.

A `sim` model (calibrated sleeps, so many replicas fit on a small machine) is served by the
embedded stack of `inferbus up` — broker, topics, ingest, the scaler with the local actuator —
while an open-loop load generator sends a low rate, a step to several replicas' worth, and
the low rate again. Every scaler tick (signals and decision) and every request's answer is
recorded; the report says how long the scaler took to react, to have the new replicas ready
and to drain the backlog, whether every request was answered, and the SLO attainment
before, during and after the step.

This module is the run (I/O). The pure parts take plain values and are tested without a
broker: the options and schedule (`step_schedule`), the report's arithmetic
(`step_analysis`), the report built from what was recorded (`step_build`), and its plot
(`step_plot`).
"""

from __future__ import annotations

import asyncio
import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from infra.models.config import ModelConfig
from infra.scan import scan_log
from infra.tasks import cancel_and_wait, wait_ended
from scaler.collector.collector import CollectorConfig, GroupCollection
from scaler.config import PolicyConfig
from scaler.service import ScalerService
from schemas.topics import RESULTS, request_topic, worker_group
from services.bench.handover import Kill
from services.bench.loadgen import Completed, EncoderEvents, LoadGenerator
from services.bench.step_analysis import Tick, rounded
from services.bench.step_build import build_report, sim_model_config
from services.bench.step_schedule import (
    Phase,
    ScaleStepOptions,
    offered_at,
    phase_at,
    phase_bounds,
    send_times,
)
from services.bench.step_watch import (
    ProcessSamples,
    TopicWatch,
    kill,
    pick_victim,
    sample_processes,
)
from services.worker.settings import WorkerSettings

Progress = Callable[[str], None]


def write_sim_model(root: Path, options: ScaleStepOptions) -> Path:
    """`<root>/<model>/model.yaml` and an empty version folder (the sim engine needs no file)."""
    config = ModelConfig.model_validate(sim_model_config(options).model_dump())
    base = root / config.name
    (base / "1").mkdir(parents=True, exist_ok=True)
    config.dump(base / "model.yaml")
    return base / "model.yaml"


class StepLoad(LoadGenerator):
    """The load generator, paced through a schedule without waiting between phases."""

    def __init__(self, bootstrap: str, model: str) -> None:
        super().__init__(bootstrap, EncoderEvents(model))
        self.answers_by_id: dict[str, tuple[float, str | None]] = {}

    async def paced(
        self, offsets: Sequence[float], start: float, seq_len: int, stop: asyncio.Event
    ) -> list[tuple[str, float]]:
        """Send one request at each `start + offset` (perf_counter); returns (id, sent_s)."""
        self._reset(len(offsets))
        sent: list[tuple[str, float]] = []
        for offset in offsets:
            if stop.is_set():
                break
            delay = start + offset - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            self._send(1, lambda: seq_len)
            # The newest key is this request's: an answer cannot be popped before it is sent.
            request_id = next(reversed(self._sent))
            sent.append((request_id, self._sent[request_id][0]))
        if self._sends:
            await asyncio.gather(*self._sends)
        return sent

    def outstanding(self) -> int:
        return len(self._sent)

    def unanswered(self) -> list[str]:
        """Request ids sent and not answered yet."""
        return list(self._sent)

    def completed(self) -> dict[str, Completed]:
        """Request id -> its first result as read."""
        return {c.request_id: c for c in self._report.completed}


async def _wait_serving(gen: LoadGenerator, seq_len: int, progress: Progress) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        report = await gen.closed_loop(1, 1, lambda: seq_len, lambda _: None)
        if report.completed and report.completed[0].status == "ok":
            return
        progress(f"not serving yet: {[c.status for c in report.completed]}")
        await asyncio.sleep(1)
    raise TimeoutError("the stack did not answer within 120 s")


def _tick_from(
    collection: GroupCollection, service: ScalerService, group: str, t: float, phases: list[Phase]
) -> Tick:
    s = collection.signals
    view = service.views.get(group)
    d = view.decision if view is not None else None
    return Tick(
        t=round(t, 2),
        phase=phase_at(phases, t),
        offered_rps=offered_at(phases, t),
        arrival_rps=rounded(s.arrival_rps, 2) if s else None,
        lag=s.lag if s else None,
        replicas=s.replicas if s else None,
        ready=s.ready_replicas if s else None,
        starting=s.starting_replicas if s else None,
        service_rps_per_replica=rounded(s.service_rps_per_replica, 2) if s else None,
        utilization=rounded(s.utilization, 3) if s else None,
        queue_p99_ms=rounded(s.queue_p99_ms) if s else None,
        engine_p99_ms=rounded(s.engine_p99_ms) if s else None,
        e2e_p99_ms=rounded(s.e2e_p99_ms) if s else None,
        current=d.current if d else None,
        desired=d.desired if d else None,
        diagnosis=d.diagnosis if d else None,
        applied=bool(view and view.applied),
        line=d.line() if d else None,
        error=(view.error if view else None) or collection.error,
    )


async def bench_scale_step(  # noqa: PLR0915 - one run, start to stop, in order
    options: ScaleStepOptions, progress: Progress
) -> dict[str, Any]:
    """Run the step against the live stack and return the JSON report."""
    from rich.console import Console

    from services.cli.stack import Stack, StackOptions

    phases = options.schedule()
    models_dir = Path(tempfile.mkdtemp(prefix="inferbus-scale-step-models-"))
    log_dir = Path(tempfile.mkdtemp(prefix="inferbus-scale-step-logs-"))
    model_yaml_text = write_sim_model(models_dir, options).read_text()
    group = worker_group(options.model, "interactive")
    topic = request_topic(options.model, "interactive")
    lease_s = WorkerSettings().lease_s
    stack = Stack(
        StackOptions(
            bootstrap=options.bootstrap,
            models_dir=models_dir,
            workers_per_group=options.min_replicas,
            headless=True,
            duration_s=None,
            with_scaler=True,
            tiers=["interactive"],
            broker_port=0,
            log_dir=log_dir,
            policy_config=PolicyConfig(scale_down_window_s=options.scale_down_window_s),
            collector_config=CollectorConfig(interval_s=options.interval_s),
            worker_env={"INFERBUS_WORKER_HEARTBEAT_INTERVAL_S": "1"},
            # Sim workers sleep instead of computing: the group's bound, not the cores.
            worker_budget=options.max_replicas,
            # Each run starts from nothing: against a Kafka given with --bootstrap, the
            # scaler would otherwise recall a previous run's decisions for the same group.
            recall_timeout_s=0.0,
        )
    )
    stack.console = Console(stderr=True)
    ticks: list[Tick] = []
    origin: list[float] = [math.inf]  # perf_counter of the schedule's start, once known
    kills: list[Kill] = []
    samples = ProcessSamples()
    stop = asyncio.Event()
    watch: TopicWatch | None = None
    in_results: dict[str, list[tuple[int, int]]] = {}
    try:
        bootstrap = await stack.start()
        service, actuator = stack.scaler, stack.actuator
        assert service is not None and actuator is not None
        watch = TopicWatch(bootstrap, topic=topic, group=group)
        await watch.start()
        registry = watch

        def workers() -> list[int]:
            return actuator.pids(group) + actuator.stopping()

        def roles() -> dict[str, list[int]]:
            broker = stack.broker.pid if stack.broker is not None else None
            ingest = [c.pid for c in (stack.ingest.children if stack.ingest else []) if c.pid]
            known = {r.pid for r in registry.registry if r.pid is not None}
            return {
                "broker": [broker] if broker else [],
                "ingest": ingest,
                "workers": sorted(known | set(workers())),
                "bench_scaler": [os.getpid()],
            }

        sampler = asyncio.create_task(
            sample_processes(samples, workers, roles, stop), name="process-samples"
        )

        async def on_tick(collections: list[GroupCollection]) -> None:
            await service.on_tick(collections)
            now = time.perf_counter()
            t = now - origin[0] if origin[0] != math.inf else -1.0
            for collection in collections:
                if collection.group != group:
                    continue
                tick = _tick_from(collection, service, group, t, phases)
                ticks.append(tick)
                if tick.applied or tick.error:
                    progress(f"t={t:6.1f}s decision: {tick.line} {tick.error or ''}".rstrip())

        scaler_task = asyncio.create_task(
            service.collector.run(on_tick, stop, current=service.current), name="scaler"
        )
        gen = StepLoad(bootstrap, options.model)
        await gen.start()
        try:
            progress("waiting for ingest and the first worker to answer")
            await _wait_serving(gen, options.seq_len, progress)
            offsets = send_times(phases)
            progress(
                "load: "
                + ", ".join(f"{p.name} {p.rate_rps:g} req/s for {p.duration_s:g}s" for p in phases)
                + f" ({len(offsets)} requests); scaler every {options.interval_s:g}s, "
                f"scale-down window {options.scale_down_window_s:g}s"
            )
            now_perf, now_wall = time.perf_counter(), time.time()
            start = now_perf + 0.5
            start_wall = now_wall + 0.5
            origin[0] = start
            reporter = asyncio.create_task(_report_progress(ticks, gen, progress))
            killer = None
            bounds = {name: (lo, hi) for name, lo, hi in phase_bounds(phases)}
            if "kill" in bounds:
                at = start + bounds["kill"][0] + options.kill_at_s
                killer = asyncio.create_task(
                    _kill_at(at, start, watch, topic, kills, progress), name="killer"
                )
            try:
                sent = await gen.paced(offsets, start, options.seq_len, stop)
                progress(f"all {len(sent)} sent; waiting for {gen.outstanding()} answers")
                deadline = time.monotonic() + options.answer_timeout_s
                while gen.outstanding() and time.monotonic() < deadline:  # noqa: ASYNC110
                    await asyncio.sleep(0.5)  # answers arrive on the generator's own task
                # A few more ticks, to see the scaler settle after the last answer.
                await asyncio.sleep(2 * options.interval_s)
                if gen.outstanding():
                    # Unanswered: is a result in the reply log that the client missed, or
                    # none at all (and is the request on the tier topic)?
                    missing = set(gen.unanswered())
                    progress(f"{len(missing)} unanswered: looking for them in {RESULTS}")
                    in_results = (await scan_log(bootstrap, RESULTS, missing)).found
            finally:
                reporter.cancel()
                # a killer that failed raises here, not in silence
                await cancel_and_wait(killer)
        finally:
            stop.set()
            await wait_ended(scaler_task)
            await sampler
            await gen.stop()
        completed = gen.completed()
        raw = {
            "start_wall": start_wall,
            "lease_s": lease_s,
            "topic": topic,
            "partitions": watch.partitions,
            "tier_topic_repeats": watch.tier_repeats,
            "invalid_registry_records": watch.invalid_registry,
            "model_yaml": model_yaml_text,
            "log_dir": str(log_dir) if options.keep_logs else None,
            "ticks": [asdict(t) for t in ticks],
            "sent": [[i, round(s - start, 4)] for i, s in sent],
            "replies": {
                k: [
                    c.status,
                    rounded(c.e2e_ms, 2),
                    round((c.received_s - start), 4),
                    c.worker_id,
                    (c.timings or {}).get("queue_ms"),
                ]
                for k, c in completed.items()
            },
            "replies_columns": ["status", "e2e_ms", "received_t", "worker", "queue_ms"],
            "repeats": dict(gen.repeats),
            "landed": {
                k: [v.partition, v.offset, v.timestamp_s] for k, v in watch.requests.items()
            },
            "registry": [r.model_dump(mode="json") for r in watch.registry],
            "kills": [asdict(k) for k in kills],
            "workers": samples.workers,
            "first_seen": {str(k): v for k, v in samples.first_seen.items()},
            "others": samples.others,
            "unanswered_in_results_log": in_results,
            "cpu": samples.cpu,
            "worker_cpu": {str(k): v for k, v in samples.worker_cpu.items()},
        }
    finally:
        stop.set()
        if watch is not None:
            await watch.stop()
        await stack.close()
        if not options.keep_logs:
            shutil.rmtree(log_dir, ignore_errors=True)
        shutil.rmtree(models_dir, ignore_errors=True)
    return build_report(raw, options)


async def _kill_at(  # noqa: PLR0917 - one task's inputs
    at: float,
    start: float,
    watch: TopicWatch,
    topic: str,
    kills: list[Kill],
    progress: Progress,
) -> None:
    """At perf_counter `at`, SIGKILL the worker that owns the most partitions."""
    await asyncio.sleep(max(at - time.perf_counter(), 0.0))
    victim = pick_victim(watch.latest(), topic)
    if victim is None or victim.pid is None:
        progress("kill: no worker owns partitions; nothing killed")
        return
    t = time.perf_counter() - start
    if not kill(victim.pid):
        progress(f"kill: {victim.instance_id} (pid {victim.pid}) had already exited")
        return
    kills.append(Kill(round(t, 3), victim.instance_id, victim.pid))
    progress(
        f"t={t:6.1f}s killed {victim.instance_id} (pid {victim.pid}, partitions "
        f"{victim.owned.get(topic)}) with SIGKILL"
    )


async def _report_progress(ticks: list[Tick], gen: StepLoad, progress: Progress) -> None:
    while True:
        await asyncio.sleep(10)
        if ticks:
            t = ticks[-1]
            progress(
                f"t={t.t:6.1f}s {t.phase:<6} offered {t.offered_rps:g}/s arrival "
                f"{t.arrival_rps if t.arrival_rps is not None else '-'}/s lag {t.lag} "
                f"replicas {t.ready}/{t.replicas} e2e p99 {t.e2e_p99_ms} ms "
                f"outstanding {gen.outstanding()}"
            )

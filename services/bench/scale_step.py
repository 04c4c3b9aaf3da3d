"""`inferbus bench scale-step`: the live scaling loop under a load step, in one run.

A `sim` model (calibrated sleeps, so many replicas fit on a small machine) is served by the
embedded stack of `inferbus up` — broker, topics, ingest, the scaler with the local actuator —
while an open-loop load generator sends a low rate, a step to several replicas' worth, and
the low rate again. Every scaler tick (signals and decision) and every request's answer is
recorded; the report says how long the scaler took to react, to have the new replicas ready
and to drain the backlog, whether every request was answered, and the SLO attainment
before, during and after the step.

The pure parts — the schedule, the send times and the report arithmetic — take plain
values, so they are tested without a broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from infra.cores import usable_cores
from infra.models.config import (
    EngineConfig,
    ModelConfig,
    ReplicaBounds,
    SimConfig,
    TierSlo,
)
from infra.scan import scan_log
from scaler.collector.collector import CollectorConfig, GroupCollection
from scaler.config import PolicyConfig
from scaler.service import ScalerService
from schemas.telemetry import InstanceRecord
from schemas.topics import RESULTS, request_topic, worker_group
from services.bench import step_sim
from services.bench.handover import Kill, duplicates, handover_report, stalls
from services.bench.loadgen import Completed, EncoderEvents, LoadGenerator
from services.bench.stats import percentiles
from services.bench.step_report import (
    Landed,
    Reply,
    cpu_by_phase,
    latency_breakdown,
    others_by_phase,
    owner_records,
    served_records,
    targets,
    time_to_ready,
    worker_cores,
)
from services.bench.step_sim import StepSimInputs
from services.bench.step_watch import (
    ProcessSamples,
    TopicWatch,
    kill,
    pick_victim,
    sample_processes,
)
from services.models.demo import encoder_config
from services.worker.settings import WorkerSettings

Progress = Callable[[str], None]

PHASES = ("before", "step", "kill", "after")

STALL_KEPT_S = 0.1
"""Stalls at least this long are kept in the report (for the plot)."""

ASSUMED_TIME_TO_READY_S = 3.0
"""Start to ready (s) the simulator takes when no worker became ready during the run."""
ASSUMED_HANDOVER_PAUSE_S = 1.0
"""Handover pause (s) the simulator takes when no moved partition was acquired by its new
owner during the run."""


@dataclass(frozen=True)
class Phase:
    """One stretch of constant offered load."""

    name: str
    rate_rps: float
    duration_s: float


@dataclass(frozen=True)
class ScaleStepOptions:
    """What to run; the defaults are the recorded benchmark."""

    model: str = "sim-encoder"
    seq_len: int = 32
    a_ms: float = 4.0
    """Sim engine: fixed cost of one batch."""
    b_ms: float = 16.0
    """Sim engine: cost per sample (one replica: 50 req/s at batch 1, 56 at batch 2)."""
    max_batch_size: int = 2
    slo_p99_ms: float = 1000.0
    min_replicas: int = 1
    max_replicas: int = 8
    low_rps: float = 25.0
    high_rps: float = 175.0
    before_s: float = 30.0
    step_s: float = 90.0
    after_s: float = 60.0
    interval_s: float = 2.0
    """Scaler collection (and decision) interval."""
    scale_down_window_s: float = 30.0
    """HPA-style scale-down stabilisation window, shortened to fit the run."""
    drain_lag: int = 25
    """Lag at or below this counts as drained (near zero)."""
    answer_timeout_s: float = 60.0
    """After the last send, wait this long for the remaining answers."""
    kill_s: float = 30.0
    """Seconds more at the step rate after the step, in which one worker is SIGKILLed
    (0: no kill phase)."""
    kill_at_s: float = 5.0
    """When, into the kill phase, the worker holding the most partitions is killed."""
    bootstrap: str | None = None
    keep_logs: bool = False
    sim_dir: str | None = None
    """Write the arrivals, model.yaml and policy JSON that `inferbus sim` replays here."""

    def schedule(self) -> list[Phase]:
        return step_schedule(
            self.low_rps, self.high_rps, self.before_s, self.step_s, self.after_s, self.kill_s
        )

    def capacity_rps(self, batch: int) -> float:
        """Requests/s one replica serves when every batch holds `batch` (engine time only)."""
        return 1000.0 * batch / (self.a_ms + self.b_ms * batch)


def step_schedule(  # noqa: PLR0917 - the schedule's six numbers, in order
    low_rps: float,
    high_rps: float,
    before_s: float,
    step_s: float,
    after_s: float,
    kill_s: float = 0.0,
) -> list[Phase]:
    """Low, high, low: the load step; with `kill_s`, the high rate goes on that long as the
    `kill` phase (a worker is killed in it) before the low rate comes back."""
    if min(low_rps, high_rps) <= 0 or min(before_s, step_s, after_s) <= 0 or kill_s < 0:
        raise ValueError("rates and durations must be > 0 (kill_s >= 0)")
    kill = [Phase("kill", high_rps, kill_s)] if kill_s > 0 else []
    return [
        Phase("before", low_rps, before_s),
        Phase("step", high_rps, step_s),
        *kill,
        Phase("after", low_rps, after_s),
    ]


def phase_bounds(phases: Sequence[Phase]) -> list[tuple[str, float, float]]:
    """(name, start s, end s) of each phase, from the schedule's start."""
    out, t = [], 0.0
    for phase in phases:
        out.append((phase.name, t, t + phase.duration_s))
        t += phase.duration_s
    return out


def send_times(phases: Sequence[Phase]) -> list[float]:
    """Evenly paced send offsets (s from the schedule's start), phase after phase."""
    times: list[float] = []
    for phase, (_, start, _end) in zip(phases, phase_bounds(phases), strict=True):
        count = round(phase.rate_rps * phase.duration_s)
        times.extend(start + i / phase.rate_rps for i in range(count))
    return times


def phase_at(phases: Sequence[Phase], t: float) -> str:
    """The phase a time belongs to: `warmup` before 0, `drain` after the last one."""
    if t < 0:
        return "warmup"
    for name, start, end in phase_bounds(phases):
        if start <= t < end:
            return name
    return "drain"


def offered_at(phases: Sequence[Phase], t: float) -> float:
    """Offered load (req/s) at time t."""
    for phase, (_, start, end) in zip(phases, phase_bounds(phases), strict=True):
        if start <= t < end:
            return phase.rate_rps
    return 0.0


# --- what is recorded -----------------------------------------------------------------


@dataclass(frozen=True)
class Tick:
    """One scaler tick of the group, as the scaler saw and decided it."""

    t: float
    """Seconds from the schedule's start (negative: warm-up)."""
    phase: str
    offered_rps: float
    arrival_rps: float | None
    lag: int | None
    replicas: int | None
    ready: int | None
    starting: int | None
    service_rps_per_replica: float | None
    utilization: float | None
    queue_p99_ms: float | None
    engine_p99_ms: float | None
    e2e_p99_ms: float | None
    current: int | None = None
    desired: int | None = None
    diagnosis: str | None = None
    applied: bool = False
    line: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class Answer:
    """One request: when it was sent (s from the schedule's start) and how it came back."""

    sent_t: float
    status: str | None
    """None: never answered."""
    e2e_ms: float | None
    roundtrip_ms: float | None


# --- report arithmetic (pure) ---------------------------------------------------------


def _first(ticks: Sequence[Tick], cond: Callable[[Tick], bool]) -> Tick | None:
    return next((t for t in ticks if cond(t)), None)


def _round(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


def reaction(
    ticks: Sequence[Tick], step_at: float, step_end: float, drain_lag: int
) -> dict[str, Any]:
    """Times from the step to the first scale-up, to its replicas ready, to the lag drained."""
    after = [t for t in ticks if t.t >= step_at]
    up = _first(after, lambda t: t.applied and (t.desired or 0) > (t.current or 0))
    ready = None
    if up is not None and up.desired is not None:
        target = up.desired
        ready = _first(after, lambda t: t.t >= up.t and (t.ready or 0) >= target)
    during = [t for t in after if t.t < step_end and t.lag is not None]
    peak = max(during, key=lambda t: t.lag or 0, default=None)
    # The first backlog after the step, and the first tick it is back at or below drain_lag
    # (a later backlog, e.g. from a scale-down's rebalance, shows in peak_lag, not here).
    backed_up = _first(during, lambda t: (t.lag or 0) > drain_lag)
    drained = None
    if backed_up is not None:
        drained = _first(
            after, lambda t: t.t > backed_up.t and t.lag is not None and t.lag <= drain_lag
        )
    peak_replicas = max((t.replicas or 0 for t in after if t.t < step_end), default=None)
    peak_desired = max((t.desired or 0 for t in after if t.t < step_end), default=None)
    down = _first(
        [t for t in ticks if t.t >= step_end],
        lambda t: t.applied and (t.desired or 0) < (t.current or 0),
    )
    return {
        "first_scale_up_s": _round(up.t - step_at) if up else None,
        "first_scale_up": up.line if up else None,
        "first_scale_up_to": up.desired if up else None,
        "ready_s": _round(ready.t - step_at) if ready else None,
        "peak_lag": peak.lag if peak else None,
        "peak_lag_s": _round(peak.t - step_at) if peak else None,
        "lag_drained_s": _round(drained.t - step_at) if drained else None,
        "drain_lag": drain_lag,
        "peak_replicas": peak_replicas,
        "peak_desired": peak_desired,
        "first_scale_down_after_step_s": _round(down.t - step_end) if down else None,
        "first_scale_down": down.line if down else None,
        "final_replicas": ticks[-1].replicas if ticks else None,
        "scaling_actions": sum(1 for t in ticks if t.applied),
        "direction_changes": direction_changes(ticks),
    }


def direction_changes(ticks: Sequence[Tick]) -> int:
    """How often an applied change went the other way from the one before (flapping)."""
    signs = [
        1 if (t.desired or 0) > (t.current or 0) else -1
        for t in ticks
        if t.applied and t.desired != t.current
    ]
    return sum(1 for a, b in itertools.pairwise(signs) if a != b)


def completeness(answers: Sequence[Answer]) -> dict[str, Any]:
    """Sent vs ok vs named rejections vs missing: every request must be accounted for."""
    by_status: dict[str, int] = {}
    for a in answers:
        if a.status is not None:
            by_status[a.status] = by_status.get(a.status, 0) + 1
    ok = by_status.get("ok", 0)
    missing = sum(1 for a in answers if a.status is None)
    return {
        "sent": len(answers),
        "ok": ok,
        "rejected": {s: n for s, n in sorted(by_status.items()) if s != "ok"},
        "missing": missing,
        "all_answered": missing == 0,
    }


def attainment(
    answers: Sequence[Answer], phases: Sequence[Phase], slo_ms: float
) -> dict[str, dict[str, Any]]:
    """Per phase (by send time): share of sent requests answered ok within the SLO; a
    rejection or a missing answer counts as a miss. p50/p99 of e2e over the ok ones."""
    out: dict[str, dict[str, Any]] = {}
    for name, start, end in phase_bounds(phases):
        sent = [a for a in answers if start <= a.sent_t < end]
        ok = [a for a in sent if a.status == "ok" and a.e2e_ms is not None]
        met = sum(1 for a in ok if (a.e2e_ms or 0.0) <= slo_ms)
        e2e = percentiles([a.e2e_ms for a in ok if a.e2e_ms is not None])
        roundtrip = percentiles([a.roundtrip_ms for a in ok if a.roundtrip_ms is not None])
        out[name] = {
            "sent": len(sent),
            "ok": len(ok),
            "within_slo": met,
            "attainment": round(met / len(sent), 4) if sent else None,
            "e2e_p50_ms": _round(e2e["p50"]),
            "e2e_p99_ms": _round(e2e["p99"]),
            "e2e_max_ms": _round(max((a.e2e_ms or 0.0 for a in ok), default=None)),
            "roundtrip_p99_ms": _round(roundtrip["p99"]),
        }
    return out


def analyze(
    ticks: Sequence[Tick],
    answers: Sequence[Answer],
    options: ScaleStepOptions,
) -> dict[str, Any]:
    """The report's numbers from what was recorded."""
    phases = options.schedule()
    bounds = {name: (start, end) for name, start, end in phase_bounds(phases)}
    step_at = bounds["step"][0]
    high_end = bounds.get("kill", bounds["step"])[1]
    needed = math.ceil(options.high_rps / options.capacity_rps(options.max_batch_size))
    return {
        "reaction": reaction(ticks, step_at, high_end, options.drain_lag),
        "needed_replicas": {
            "step_at_full_batches": needed,
            "step_at_batch_1": math.ceil(options.high_rps / options.capacity_rps(1)),
            "note": "engine time only: the high rate over one replica's capacity at 100% busy",
        },
        "answers": completeness(answers),
        "slo_attainment": attainment(answers, phases, options.slo_p99_ms),
    }


def summary_line(report: dict[str, Any]) -> str:
    """One line: reaction times, answers, attainment."""
    r, a, s = report["reaction"], report["answers"], report["slo_attainment"]

    def sec(v: float | None) -> str:
        return "never" if v is None else f"{v:.0f}s"

    def pct(v: float | None) -> str:
        return "-" if v is None else f"{100 * v:.1f}%"

    rejected = sum(a["rejected"].values())
    need = report["needed_replicas"]["step_at_batch_1"]
    return (
        f"step {report['options']['low_rps']:.0f}→{report['options']['high_rps']:.0f} req/s: "
        f"first scale-up +{sec(r['first_scale_up_s'])} (→{r['first_scale_up_to']}), "
        f"ready +{sec(r['ready_s'])}, lag {r['peak_lag']} drained +{sec(r['lag_drained_s'])}; "
        f"peak replicas {r['peak_replicas']} (need ~{need}), "
        f"final {r['final_replicas']} | answered ok {a['ok']}/{a['sent']}, rejected {rejected}, "
        f"missing {a['missing']} | SLO {report['options']['slo_p99_ms']:.0f} ms met: "
        + ", ".join(f"{name} {pct(row['attainment'])}" for name, row in s.items())
    )


# --- the model ------------------------------------------------------------------------


def sim_model_config(options: ScaleStepOptions) -> ModelConfig:
    """demo-encoder's interface with the `sim` engine, small batches, one tier."""
    base = encoder_config()
    return base.model_copy(
        update={
            "name": options.model,
            "description": "Load-step benchmark: demo-encoder's inputs, simulated engine time.",
            "tokenizer": None,
            "batching": base.batching.model_copy(
                update={"max_batch_size": options.max_batch_size, "length_buckets": []}
            ),
            "engine": EngineConfig(
                kind="sim",
                sim=SimConfig(a_ms=options.a_ms, b_ms=options.b_ms, per="sample"),
            ),
            "slo": {"interactive": TierSlo(p99_e2e_ms=options.slo_p99_ms)},
            "replicas": ReplicaBounds(
                min=options.min_replicas, max=options.max_replicas, warm=options.min_replicas
            ),
            "warmup": base.warmup.model_copy(update={"batch_sizes": [1], "sequence_lengths": []}),
            "tiers": ["interactive"],
        }
    )


def write_sim_model(root: Path, options: ScaleStepOptions) -> Path:
    """`<root>/<model>/model.yaml` and an empty version folder (the sim engine needs no file)."""
    config = ModelConfig.model_validate(sim_model_config(options).model_dump())
    base = root / config.name
    (base / "1").mkdir(parents=True, exist_ok=True)
    config.dump(base / "model.yaml")
    return base / "model.yaml"


# --- the run (I/O) --------------------------------------------------------------------


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
        arrival_rps=_round(s.arrival_rps, 2) if s else None,
        lag=s.lag if s else None,
        replicas=s.replicas if s else None,
        ready=s.ready_replicas if s else None,
        starting=s.starting_replicas if s else None,
        service_rps_per_replica=_round(s.service_rps_per_replica, 2) if s else None,
        utilization=_round(s.utilization, 3) if s else None,
        queue_p99_ms=_round(s.queue_p99_ms) if s else None,
        engine_p99_ms=_round(s.engine_p99_ms) if s else None,
        e2e_p99_ms=_round(s.e2e_p99_ms) if s else None,
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
                if killer is not None:
                    killer.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await killer  # a killer that failed raises here, not in silence
        finally:
            stop.set()
            with contextlib.suppress(asyncio.CancelledError):
                await scaler_task
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
                    _round(c.e2e_ms, 2),
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


def build_report(raw: dict[str, Any], options: ScaleStepOptions) -> dict[str, Any]:
    """The report from what a run recorded (`raw`, kept in the report: a saved report can
    be analysed again with `--from-json`)."""
    phases = options.schedule()
    bounds_list = phase_bounds(phases)
    start_wall = raw["start_wall"]
    ticks = [Tick(**t) for t in raw["ticks"]]
    replies_raw: dict[str, list[Any]] = raw["replies"]
    answers = []
    for request_id, sent_t in raw["sent"]:
        got = replies_raw.get(request_id)
        answers.append(
            Answer(
                sent_t=sent_t,
                status=got[0] if got else None,
                e2e_ms=got[1] if got else None,
                roundtrip_ms=round((got[2] - sent_t) * 1000, 2) if got else None,
            )
        )
    ids = [request_id for request_id, _ in raw["sent"]]
    replies = {k: Reply(v[0], v[3], v[4]) for k, v in replies_raw.items()}
    landed = {k: Landed(*v) for k, v in raw["landed"].items()}
    registry = [InstanceRecord.model_validate(r) for r in raw["registry"]]
    kills = [Kill(**k) for k in raw["kills"]]
    served, unseen = served_records(ids, replies, landed, start_wall)
    owners = owner_records(registry, raw["topic"], start_wall)
    end_t = max(
        (a.sent_t + (a.roundtrip_ms or 0) / 1000 for a in answers), default=bounds_list[-1][2]
    )
    found = stalls(served, end_t)
    handover = handover_report(
        served,
        owners,
        stalled=found,
        partitions=raw["partitions"],
        end_t=end_t,
        kills=kills,
        lease_s=raw["lease_s"],
        phases=bounds_list,
        from_t=0.0,
    )
    handover["unseen_on_tier_topic"] = unseen
    handover["tier_topic_repeats"] = raw["tier_topic_repeats"]
    unanswered: dict[str, list[list[int]]] = raw.get("unanswered_in_results_log", {})
    repeats: dict[str, list[str]] = raw["repeats"]
    statuses = {i: [replies[i].status, *repeats.get(i, [])] for i in ids if i in replies}
    high = [(lo, hi) for name, lo, hi in bounds_list if name in ("step", "kill")]
    report: dict[str, Any] = {
        "benchmark": "scale-step",
        "cores": usable_cores(),
        "options": asdict(options),
        "schedule": [asdict(p) for p in phases],
        "capacity_rps_per_replica": {
            "batch_1": round(options.capacity_rps(1), 1),
            f"batch_{options.max_batch_size}": round(
                options.capacity_rps(options.max_batch_size), 1
            ),
        },
        "policy": "slo",
        "partitions": raw["partitions"],
        "worker_lease_s": raw["lease_s"],
        **analyze(ticks, answers, options),
        "duplicates": duplicates(statuses, ids),
        "unanswered": {
            "count": len(unanswered),
            "result_in_log_client_missed_it": sorted(i for i, at in unanswered.items() if at),
            "no_result_in_log": sorted(i for i, at in unanswered.items() if not at),
            "where": {
                i: {"results": at, "tier": raw["landed"].get(i)} for i, at in unanswered.items()
            },
        },
        "handover": handover,
        "time_to_ready": time_to_ready(
            registry,
            start_wall - options.before_s,
            {int(k): v for k, v in raw.get("first_seen", {}).items()},
        ),
        "cpu_cores_busy": cpu_by_phase(raw["cpu"], bounds_list, start_wall),
        "other_processes_cores": others_by_phase(raw.get("others", []), bounds_list, start_wall),
        "latency_breakdown": latency_breakdown(
            raw["sent"],
            {k: (v[1], v[4]) for k, v in replies_raw.items()},
            landed,
            start_wall,
            bounds_list,
        ),
        "worker_cores_in_high_load": worker_cores(
            {int(k): v for k, v in raw["worker_cpu"].items()},
            start_wall + high[0][0],
            start_wall + high[-1][1],
        ),
        "logs": raw["log_dir"],
        "ticks": raw["ticks"],
        "workers_over_time": [[round(t - start_wall, 2), n] for t, n in raw["workers"]],
        "stalls": [
            [p, round(x.start_t, 3), round(x.end_t, 3)]
            for p, found_p in found.items()
            for x in found_p
            if x.duration_s >= STALL_KEPT_S
        ],
        "stalls_columns": ["partition", "start_t", "end_t"],
        "requests": [[a.sent_t, a.status, a.e2e_ms, a.roundtrip_ms] for a in answers],
        "requests_columns": ["sent_t", "status", "e2e_ms", "roundtrip_ms"],
    }
    offsets = [t for _, t in raw["sent"]]
    report["sim"] = compare_with_sim(report, options, offsets, raw["model_yaml"])
    report["targets"] = targets(report)
    report["raw"] = raw
    return report


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


def measured_or_assumed(report: dict[str, Any]) -> tuple[float, float, list[str]]:
    """The time-to-ready and handover pause the simulator takes from the live run, and one
    note per input the run did not measure: the value assumed instead and why."""
    assumed: list[str] = []
    time_to_ready_s = _measured_time_to_ready(report["time_to_ready"])
    if time_to_ready_s is None:
        time_to_ready_s = ASSUMED_TIME_TO_READY_S
        assumed.append(f"time_to_ready_s={time_to_ready_s}: no worker became ready during the run")
    moved = report["handover"]["moved"]
    # From the change to the new owner's acquisition: traffic-independent (the stall
    # measure sees only pauses that records waited through).
    handover_pause_s = moved["median_acquired_s"]
    if handover_pause_s is None:
        handover_pause_s = ASSUMED_HANDOVER_PAUSE_S
        assumed.append(f"handover_pause_s={handover_pause_s}: {_why_no_handover(moved)}")
    return time_to_ready_s, handover_pause_s, assumed


def _measured_time_to_ready(time_to_ready: dict[str, Any]) -> float | None:
    """Spawn to ready as the benchmark saw it; else start to ready as the worker said."""
    spawn_to_ready: float | None = time_to_ready["spawn_to_ready_median_s"]
    return spawn_to_ready if spawn_to_ready is not None else time_to_ready["median_s"]


def _why_no_handover(moved: dict[str, Any]) -> str:
    if not moved["count"]:
        return "no partition moved to another worker during the run"
    return f"none of the {moved['count']} moved partitions was acquired by a new owner"


def compare_with_sim(
    report: dict[str, Any], options: ScaleStepOptions, offsets: Sequence[float], model_yaml: str
) -> dict[str, Any]:
    """The simulator on the same arrivals and settings; live and sim side by side."""
    time_to_ready_s, handover_pause_s, assumed = measured_or_assumed(report)
    workers = report["workers_over_time"]
    initial = next((n for t, n in reversed(workers) if t <= 0), options.min_replicas)
    inputs = StepSimInputs(
        a_ms=options.a_ms,
        b_ms=options.b_ms,
        max_batch_size=options.max_batch_size,
        max_queue_delay_ms=sim_model_config(options).batching.max_queue_delay_ms,
        slo_ms=options.slo_p99_ms,
        partitions=report["partitions"],
        time_to_ready_s=time_to_ready_s,
        handover_pause_s=handover_pause_s,
        interval_s=options.interval_s,
        min_replicas=options.min_replicas,
        max_replicas=options.max_replicas,
        initial_replicas=max(initial, options.min_replicas),
        scale_down_window_s=options.scale_down_window_s,
        seq_len=options.seq_len,
    )
    duration = max(offsets)
    simulated = step_sim.run(offsets, duration, inputs)
    phases = options.schedule()
    sim_answers = [
        Answer(t, "ok" if e is not None else None, e, None)
        for t, e in step_sim.outcome_answers(simulated)
    ]
    sim_att = attainment(sim_answers, phases, options.slo_p99_ms)
    live_att = report["slo_attainment"]
    live_answers = [Answer(r[0], r[1], r[2], r[3]) for r in report["requests"]]
    everything = [Phase("all", 0.0, duration + 1e-6)]
    live_all = attainment(live_answers, everything, options.slo_p99_ms)["all"]["attainment"]
    sim_all = attainment(sim_answers, everything, options.slo_p99_ms)["all"]["attainment"]
    live_cost = step_sim.replica_seconds([(t, n) for t, n in workers], 0.0, duration)
    sim_cost = simulated.groups[0].replica_seconds
    live: dict[str, float | None] = {"attainment_all": live_all}
    sim: dict[str, float | None] = {"attainment_all": sim_all}
    for phase in phases:
        live[f"attainment_{phase.name}"] = live_att[phase.name]["attainment"]
        sim[f"attainment_{phase.name}"] = sim_att[phase.name]["attainment"]
    live["replica_seconds"], sim["replica_seconds"] = round(live_cost, 1), round(sim_cost, 1)
    out: dict[str, Any] = {
        "inputs": asdict(inputs),
        "assumed": assumed,
        "side_by_side": step_sim.side_by_side(live, sim),
        "sim_actions": simulated.groups[0].actions,
        "sim_peak_replicas": max((t.replicas for t in simulated.ticks), default=None),
        "sim_decisions": list(simulated.lines),
        "note": "the simulator does not model the kill; it replays the same send times",
    }
    if options.sim_dir is not None:
        paths = step_sim.write_inputs(Path(options.sim_dir), offsets, inputs, model_yaml)
        out["command"] = step_sim.sim_command(paths, inputs)
    return out


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


# --- plot -----------------------------------------------------------------------------


def plot_scale_step(report: dict[str, Any], path: Path) -> None:
    """Load, replicas, lag and e2e p99 over time, the step shaded, decisions marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ticks = [t for t in report["ticks"] if t["t"] >= -5]
    options = report["options"]
    bounds = phase_bounds([Phase(**p) for p in report["schedule"]])
    step_at, step_end = next((s, e) for n, s, e in bounds if n == "step")
    kill_phase = next(((s, e) for n, s, e in bounds if n == "kill"), None)
    ts = [t["t"] for t in ticks]
    fig, axes = plt.subplots(5, 1, figsize=(11, 14), sharex=True, height_ratios=(1, 1, 1, 1, 1.4))
    load, reps, lag, lat, gaps = axes
    load.plot(ts, [t["offered_rps"] for t in ticks], drawstyle="steps-post", label="offered")
    load.plot(ts, [t["arrival_rps"] for t in ticks], label="arrival (scaler)")
    ready_cap = [(t["ready"] or 0) * report["capacity_rps_per_replica"]["batch_1"] for t in ticks]
    load.plot(ts, ready_cap, ":", label="ready replicas × capacity (batch 1)")
    load.set_ylabel("req/s")
    load.legend(loc="upper right", fontsize=8)
    reps.plot(ts, [t["replicas"] for t in ticks], drawstyle="steps-post", label="replicas")
    reps.plot(ts, [t["ready"] for t in ticks], drawstyle="steps-post", label="ready")
    reps.plot(ts, [t["desired"] for t in ticks], "x", label="desired")
    for t in ticks:
        if t["applied"]:
            reps.annotate(f"{t['current']}→{t['desired']}", (t["t"], t["desired"]), fontsize=7)
    reps.set_ylabel("replicas")
    reps.legend(loc="upper right", fontsize=8)
    lag.plot(ts, [t["lag"] for t in ticks], color="#a33")
    lag.set_ylabel("lag (requests)")
    lat.plot(ts, [t["e2e_p99_ms"] for t in ticks], label="e2e p99 (scaler window)")
    lat.plot(ts, [t["queue_p99_ms"] for t in ticks], label="queue p99 (scaler)")
    per_second: dict[int, list[float]] = {}
    for sent_t, status, e2e, _ in report["requests"]:
        if status == "ok" and e2e is not None:
            per_second.setdefault(int(sent_t // 2) * 2, []).append(e2e)
    secs = sorted(per_second)
    lat.plot(
        secs,
        [float(percentiles(per_second[s])["p99"] or 0.0) for s in secs],
        ".",
        markersize=3,
        label="e2e p99 of requests sent in each 2 s",
    )
    lat.axhline(options["slo_p99_ms"], color="k", linestyle="--", linewidth=0.8, label="SLO")
    lat.set_yscale("log")
    lat.set_ylabel("ms")
    lat.legend(loc="upper right", fontsize=8)
    _plot_gaps(gaps, report)
    gaps.set_xlabel("s from the start of the schedule")
    for ax in axes:
        ax.axvspan(step_at, step_end, color="#fc0", alpha=0.15)
        if kill_phase is not None:
            ax.axvspan(*kill_phase, color="#f66", alpha=0.12)
        ax.grid(alpha=0.3)
    r = report["reaction"]
    load.set_title(
        f"scale-step {options['low_rps']:g}→{options['high_rps']:g} req/s: scale-up "
        f"+{r['first_scale_up_s']}s, ready +{r['ready_s']}s, lag drained +{r['lag_drained_s']}s"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _plot_gaps(ax: Any, report: dict[str, Any]) -> None:
    """Per partition: every stall of 0.1 s or more as a bar (colour by length), moves as
    dots where the new owner acquired the partition, changes as lines, kills in red."""
    colours = ((1.0, "#d62728"), (0.5, "#ff7f0e"), (0.0, "#999999"))
    for partition, start, end in report.get("stalls", []):
        colour = next(c for limit, c in colours if end - start >= limit)
        ax.broken_barh([(start, end - start)], (partition - 0.4, 0.8), color=colour)
    handover = report.get("handover") or {}
    for change in handover.get("changes", []):
        style = "-" if change["trigger"] == "kill" else ":"
        colour = "#d62728" if change["trigger"] == "kill" else "#1f77b4"
        ax.axvline(change["start_t"], color=colour, linestyle=style, linewidth=0.7)
        for move in change["moved"]:
            if move["acquired_s"] is not None:
                ax.plot(change["start_t"] + move["acquired_s"], move["partition"], "o",
                        color="#1f77b4", markersize=3)  # fmt: skip
    ax.set_ylabel("partition")
    ax.set_ylim(-0.6, max(report.get("partitions") or 1, 1) - 0.4)
    ax.set_title(
        "stalls (a record waiting, none read): grey < 0.5 s, orange 0.5-1 s, red >= 1 s; "
        "dots: moved partition acquired; dotted: membership change; red line: kill",
        fontsize=8,
    )

"""`inferbus bench throughput`: raw engine samples/s, then end to end through the bus, one run.

Phases: (1) the raw engine alone at the configured batch size; (2) saturation through
broker, ingest and one worker (closed loop); (3) half that rate open loop, Poisson arrivals
(as the peers' load generator draws them), for the overhead the bus adds over engine time;
then (4) every `KEEP_EVERY`-th answer is compared with ONNX Runtime run directly on the
same inputs (`outputs.py`; a mismatch fails the command). Broker, ingest, worker and load
generator share this machine's cores: the report says how many.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from infra.broker import EmbeddedBroker
from infra.cores import usable_cores
from infra.models.repository import ModelRepository, ModelVersion
from infra.processes import ChildProcess, inferbus_command
from infra.tasks import within
from infra.topics import ensure_topics, standard_topics
from schemas.errors import InferbusError
from schemas.topics import Tier
from services.bench.cpu import CpuMeter
from services.bench.loadgen import Completed, EncoderEvents, LoadGenerator, LoadReport
from services.bench.otlp_sink import OtlpSink
from services.bench.outputs import (
    FP16_TOLERANCE,
    KEEP_EVERY,
    TOLERANCE,
    Kept,
    OutputCheck,
    check_outputs,
)
from services.bench.stats import (
    batch_histogram,
    percentiles,
    saturation_window,
    statuses,
    steady_throughput,
    window_bound,
)
from services.models.demo import write_demo_models
from services.worker.engines.factory import create_engine
from services.worker.engines.shapes import warmup_batches
from services.worker.settings import WorkerSettings

Progress = Callable[[str], None]


class BenchFailed(InferbusError):
    """A benchmark could not go on (a process of its stack exited, a probe failed): one line
    that says where to look, not a traceback."""


@dataclass(frozen=True)
class ThroughputOptions:
    """What to measure."""

    model: str = "demo-encoder"
    seq_len: int = 32
    requests: int = 3000
    window: int | None = None
    """Requests kept outstanding at saturation; None: `saturation_window` for the workers
    and the model's batch size."""
    raw_seconds: float = 5.0
    bootstrap: str | None = None
    models_dir: Path | None = None
    long_len: int = 512
    long_share: float = 0.0
    engine: str = "model"
    """`model`: the engine model.yaml names; `null`: an engine that does no work (sim with
    a = b = 0), so the run measures the bus ceiling; `sim`: model.yaml's `engine.sim` (the
    times `inferbus models calibrate` measured), so the run measures the bus at the model's
    rate without the engine's CPU beside it."""
    intra_op_threads: int | None = None
    """Override the served engine's ONNX Runtime intra-op threads (0: all cores)."""
    ingest_instances: int = 1
    workers: int | None = None
    """Worker processes; None: `default_workers` (one per core on a CPU engine)."""
    encoding: str = "frame"
    """The load generator's request form: frame, b64 or list."""
    trace_ratio: float | None = None
    """None: no span export (tracing off); else export to a local sink at this ratio."""
    open_rate: float | None = None
    """The open-loop phase's rate, req/s; None: half the saturated rate. A fixed rate
    compares runs (and servers) at the same load, which half of a noisy peak does not."""
    tier: Tier | None = None
    """Send to this tier's ingest topic, served by workers of that tier; None: the shared
    ingest topic, interactive requests (every run before stop 37)."""


def sequence_batch(
    version: ModelVersion, batch: int, seq_len: int
) -> dict[str, np.ndarray[Any, Any]]:
    """A batch like the load generator's: random ids, full mask."""
    rng = np.random.default_rng(0)
    inputs: dict[str, np.ndarray[Any, Any]] = {}
    for spec in version.config.inputs:
        if spec.name == version.config.batching.sequence_input:
            inputs[spec.name] = rng.integers(5, 1000, size=(batch, seq_len)).astype(np.int64)
        elif len(spec.shape) >= 2 and spec.shape[1] == -1:
            inputs[spec.name] = np.ones((batch, seq_len), dtype=np.int64)
        else:
            shape = [batch, *[d if d > 0 else 1 for d in spec.shape[1:]]]
            inputs[spec.name] = rng.random(shape).astype(np.float32)
    return inputs


def all_cores(version: ModelVersion) -> ModelVersion:
    """The same model as ONNX Runtime runs it by default on every core: what a user gets
    without us. Its intra-op threads spin between runs, as ONNX Runtime's do unless told
    otherwise: served engines turn that off (`intra_op_spinning`, they share the cores
    with the bus), and a reference that kept it off read under plain ONNX Runtime (MiniLM
    on 2 cores, alternated: 310 / 327 off, 339 / 337 on; docs/benchmarks.md "Stop 34")."""
    engine = version.config.engine.model_copy(
        update={"intra_op_num_threads": 0, "intra_op_spinning": True}
    )
    config = version.config.model_copy(update={"engine": engine})
    return ModelVersion(version.name, version.version, version.directory, config)


def raw_engine_throughput(version: ModelVersion, seq_len: int, seconds: float) -> dict[str, Any]:
    """Samples/s of the engine alone at max_batch_size, timed in a tight loop."""
    engine = create_engine(version)
    engine.load()
    engine.warmup(warmup_batches(version.config))
    batch_size = version.config.batching.max_batch_size
    batch = sequence_batch(version, batch_size, seq_len)
    engine.infer(batch)
    runs, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        engine.infer(batch)
        runs += 1
    elapsed = time.perf_counter() - started
    engine.unload()
    return {
        "batch_size": batch_size,
        "runs": runs,
        "samples_per_s": runs * batch_size / elapsed,
        "ms_per_batch": elapsed / runs * 1000,
        "kind": version.config.engine.kind,
        "provider": engine.info.label,
        "intra_op_num_threads": version.config.engine.intra_op_num_threads,
    }


def default_workers(cores: int, intra_op_threads: int, provider: str) -> tuple[int, str]:
    """How many worker processes serve a model by default, and why.

    An engine on the CPU with a fixed number of intra-op threads gets one worker per that
    many cores: each worker's event loop, decoding and encoding then run beside its own
    engine thread, where one worker on all cores leaves the bus work between its batches
    on one core (measured on 2 cores, MiniLM: 2 workers x 1 thread 0.83-0.85 of raw ONNX
    Runtime, 1 worker on all threads 0.68; docs/benchmarks.md). A GPU engine, a simulated
    one, or one that takes all cores (0 threads) gets one worker.
    """
    if "CPUExecutionProvider" not in provider or "simulated" in provider:
        return 1, f"1: the engine runs on {provider}, not on the CPU cores"
    if intra_op_threads <= 0:
        return 1, "1: its engine uses all cores (intra_op_num_threads 0)"
    workers = max(cores // intra_op_threads, 1)
    return workers, (
        f"{workers}: {cores} cores / {intra_op_threads} intra-op thread(s) a worker (CPU engine)"
    )


def default_window(workers: int, version: ModelVersion) -> int:
    """The saturation window for `workers` serving `version` with the workers' settings
    (`saturation_window`)."""
    settings = WorkerSettings()
    return saturation_window(
        workers=workers,
        batches_in_hand=settings.engine_queue_depth + settings.prefetch_batches,
        max_batch_size=version.config.batching.max_batch_size,
    )


def ratio_over_raw(
    engine: str, e2e_per_s: float, raw_per_s: float, *, raw_kind: str
) -> float | None:
    """End to end over what a user gets without us, for the model's own engine only: a
    `null` or `sim` run's raw reading is one simulated engine, not ONNX Runtime on every
    core, and a ratio over it would say nothing a user could compare (None); nor would a
    model whose own model.yaml names the simulated engine (`raw_kind` "sim")."""
    if engine != "model" or raw_kind == "sim" or raw_per_s <= 0:
        return None
    return e2e_per_s / raw_per_s


def served_provider(engine: str, raw_provider: str) -> str:
    """What `default_workers` sizes for: the raw engine's provider; for `sim`, the model's
    CPU engine that its times stand for (pass --workers where the model runs on a GPU)."""
    if engine == "null":
        return "null engine (simulated)"
    if engine == "sim":
        return "CPUExecutionProvider, timed by model.yaml's engine.sim"
    return raw_provider


def by_worker(ok: list[Completed]) -> dict[str, dict[str, Any]]:
    """Each worker's answers and their e2e percentiles: with partitions spread evenly, a
    slower worker's partitions queue longer and its share of a backlog grows."""
    workers: dict[str, list[Completed]] = {}
    for c in ok:
        workers.setdefault(c.worker_id or "?", []).append(c)
    return {
        worker: {
            "answered": len(answers),
            "e2e_ms": percentiles([c.e2e_ms for c in answers if c.e2e_ms is not None]),
        }
        for worker, answers in sorted(workers.items())
    }


STAGES = ("ingest_ms", "queue_ms", "batch_wait_ms", "preprocess_ms", "infer_ms", "postprocess_ms")
"""The stage timings a result reports, in the order a request passes them."""


def stage_percentiles(ok: list[Completed]) -> dict[str, dict[str, float | None]]:
    """p50 and p99 of each stage over the answers that report it."""
    spread = {
        stage: percentiles(
            [c.timings[stage] or 0.0 for c in ok if c.timings.get(stage) is not None]
        )
        for stage in STAGES
    }
    return {f"stage_{q}_ms": {stage: spread[stage][q] for stage in STAGES} for q in ("p50", "p99")}


def summarize(report: LoadReport) -> dict[str, Any]:
    """Throughput, latency percentiles and batch sizes of one phase."""
    ok = [c for c in report.completed if c.status == "ok"]
    e2e = [c.e2e_ms for c in ok if c.e2e_ms is not None]
    overhead = [c.e2e_ms - c.engine_ms for c in ok if c.e2e_ms is not None]
    client = [(c.received_s - c.sent_s) * 1000 for c in ok]
    return {
        "sent": report.sent,
        "answered": len(report.completed),
        "statuses": statuses(report.completed),
        "samples_per_s": steady_throughput(ok),
        "e2e_ms": percentiles(e2e),
        "client_roundtrip_ms": percentiles(client),
        "overhead_ms": percentiles(overhead),
        "batch_sizes": batch_histogram(ok),
        "by_worker": by_worker(ok),
        **stage_percentiles(ok),
    }


class Deployment:
    """Broker (embedded unless given), topics, ingest instances and workers per model."""

    def __init__(
        self,
        bootstrap: str | None,
        models_dir: Path,
        models: list[str],
        log_dir: Path,
        *,
        ingest_instances: int = 1,
        workers: int = 1,
        tier: Tier = "interactive",
        env: dict[str, str] | None = None,
    ) -> None:
        self.broker = EmbeddedBroker(port=0) if bootstrap is None else None
        self.bootstrap = bootstrap or ""
        self.models_dir = models_dir
        self.models = models
        self.log_dir = log_dir
        self.ingest_instances = ingest_instances
        self.workers = workers
        self.tier: Tier = tier
        self.env = env or {}
        self.children: list[ChildProcess] = []

    async def start(self) -> str:
        if self.broker is not None:
            self.bootstrap = await asyncio.to_thread(self.broker.start)
        await ensure_topics(self.bootstrap, standard_topics(self.models))
        env = {"INFERBUS_WORKER_HEARTBEAT_INTERVAL_S": "2", **self.env}
        common = [
            "--bootstrap",
            self.bootstrap,
            "--models",
            str(self.models_dir),
            "--log-level",
            "WARNING",
        ]
        for i in range(self.ingest_instances):
            self.children.append(
                ChildProcess(
                    f"ingest-{i}",
                    inferbus_command("ingest", *common),
                    env=self.env,
                    log_path=self.log_dir / f"ingest-{i}.log",
                )
            )
        for model in self.models:
            for i in range(self.workers):
                self.children.append(
                    ChildProcess(
                        f"worker-{model}-{i}",
                        inferbus_command("worker", "--model", model, "--tier", self.tier, *common),
                        env=env,
                        log_path=self.log_dir / f"worker-{model}-{i}.log",
                    )
                )
        for child in self.children:
            child.start()
        return self.bootstrap

    def check(self) -> None:
        """Raise when a child exited: its log says why."""
        for child in self.children:
            if not child.running:
                code = child.process.returncode if child.process else None
                raise BenchFailed(f"{child.name} exited with {code}; see {child.log_path}")

    def pids(self) -> dict[str, int]:
        """Every process of the deployment by role (`ingest-0`, `worker-demo-encoder-0`, ...)."""
        out = {c.name: c.pid for c in self.children if c.pid is not None}
        if self.broker is not None and self.broker.pid is not None:
            out["broker"] = self.broker.pid
        return out

    async def stop(self) -> None:
        for child in self.children:
            await asyncio.to_thread(child.stop)
        if self.broker is not None:
            await asyncio.to_thread(self.broker.stop)


async def wait_until_serving(
    gen: LoadGenerator, deployment: Deployment, progress: Progress, timeout_s: float = 120
) -> None:
    """Send single requests until one comes back ok (workers joined, ingest ready)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        deployment.check()
        report = await within(
            gen.closed_loop(1, 1, lambda: 8, lambda _: deployment.check()),
            max(deadline - time.monotonic(), 1),
        )
        if report.completed and report.completed[0].status == "ok":
            return
        progress(f"not serving yet: {statuses(report.completed)}")
    raise TimeoutError("the stack did not answer within the start-up timeout")


def prepare_models(options: ThroughputOptions) -> Path:
    """A private copy of the model repository to serve, the engine set as asked.

    The given repository (or, without one, fresh demo models) is copied, so a `null` engine
    or a thread override never touches the user's files. A given repository without the
    model raises ModelNotFound (it once fell back to the demo models, and a run then
    measured what was not asked for); the copy is removed on any failure.
    """
    root = Path(tempfile.mkdtemp(prefix="inferbus-bench-models-"))
    try:
        _copy_engine_as_asked(options, root)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    return root


def _copy_engine_as_asked(options: ThroughputOptions, root: Path) -> None:
    source = options.models_dir
    if source is None:
        write_demo_models(root)
    else:
        ModelRepository(source).config(options.model)  # ModelNotFound before copying
        shutil.copytree(source, root, dirs_exist_ok=True, symlinks=True)
    path = root / options.model / "model.yaml"
    raw = yaml.safe_load(path.read_text())
    if options.engine in ("null", "sim"):
        raw["engine"]["kind"] = "sim"
    if options.engine == "null":
        raw["engine"]["sim"] = {**raw["engine"].get("sim", {}), "a_ms": 0.0, "b_ms": 0.0}
    if options.intra_op_threads is not None:
        raw["engine"]["intra_op_num_threads"] = options.intra_op_threads
    path.write_text(yaml.safe_dump(raw, sort_keys=False))


def _child_env(options: ThroughputOptions, sink: OtlpSink | None) -> dict[str, str]:
    if sink is None:
        return {"OTEL_TRACES_EXPORTER": "none"}
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": sink.endpoint,
        "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
        "OTEL_TRACES_SAMPLER_ARG": str(options.trace_ratio),
    }


async def _measured(meter: CpuMeter, run: Callable[[], Awaitable[LoadReport]]) -> dict[str, Any]:
    started = time.perf_counter()
    meter.start()
    report = await run()
    seconds = time.perf_counter() - started
    summary = summarize(report)
    summary["cpu"] = meter.stop(requests=len(report.completed), seconds=seconds)
    summary["seconds"] = round(seconds, 2)
    return summary


def _answered(progress: Progress) -> Callable[[int], None]:
    """The load generator's progress callback: how many answers so far."""
    return lambda done: progress(f"answered {done}")


def _open_loop(open_rate: float | None, saturated_rps: float) -> tuple[float, int]:
    """The open-loop phase's rate (--open-rate, else half the saturated rate) and requests
    (10 s of that rate, at least 200)."""
    rate = open_rate if open_rate is not None else max(saturated_rps / 2, 1.0)
    return rate, max(int(rate * 10), 200)


def _with_window(saturated: dict[str, Any], window: int, cores: int) -> dict[str, Any]:
    """The saturation phase's figures with its window, and whether the window set the rate."""
    saturated["window"] = window
    saturated["window_bound"] = window_bound(
        window=window,
        roundtrip_p50_ms=saturated["client_roundtrip_ms"]["p50"],
        served_rps=saturated["samples_per_s"],
        cores_busy=saturated["cpu"]["machine_cores_busy"],
        cores=cores,
    )
    return saturated


async def bench_throughput(
    options: ThroughputOptions, progress: Progress, ran: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Run all phases and return the JSON report. `ran`, when given, gets each phase's
    figures as the phase ends (`raw_engine`, `saturation`, `half_load`), so that a run cut
    short (Ctrl-C) can still report what it measured."""
    ran = {} if ran is None else ran
    ran.update(
        benchmark="throughput", model=options.model, engine=options.engine, seq_len=options.seq_len
    )
    models_dir = prepare_models(options)
    log_dir = Path(tempfile.mkdtemp(prefix="inferbus-bench-logs-"))
    sink: OtlpSink | None = None
    try:
        sink = OtlpSink().__enter__() if options.trace_ratio is not None else None
        version = ModelRepository(models_dir).resolve(options.model)
        cores = usable_cores()
        reference = all_cores(version) if options.engine == "model" else version
        progress(
            f"raw engine: {options.model} seq {options.seq_len}, {options.raw_seconds:.0f}s "
            f"({reference.config.engine.kind}, all cores)"
        )
        raw = await asyncio.to_thread(
            raw_engine_throughput, reference, options.seq_len, options.raw_seconds
        )
        progress(f"raw engine: {raw['samples_per_s']:.0f} samples/s at batch {raw['batch_size']}")
        ran["raw_engine"] = raw
        workers, workers_why = (
            (options.workers, "--workers")
            if options.workers is not None
            else default_workers(
                cores,
                version.config.engine.intra_op_num_threads,
                served_provider(options.engine, raw["provider"]),
            )
        )
        progress(f"workers: {workers_why}")
        window = options.window if options.window is not None else default_window(workers, version)
        deployment = Deployment(
            options.bootstrap,
            models_dir,
            [options.model],
            log_dir,
            ingest_instances=options.ingest_instances,
            workers=workers,
            tier=options.tier or "interactive",
            env=_child_env(options, sink),
        )
        bootstrap = await deployment.start()
        rng = np.random.default_rng(1)
        events = EncoderEvents(
            options.model,
            encoding=options.encoding,
            tier=options.tier or "interactive",
            keep_every=KEEP_EVERY if computes_outputs(options.engine, version) else 0,
        )
        gen = LoadGenerator(bootstrap, events, tier=options.tier, keep_results_of=events.kept)
        try:
            await gen.start()
            progress("waiting for ingest and the worker to serve")
            await wait_until_serving(gen, deployment, progress)
            lengths = _lengths(options, rng)
            meter = CpuMeter({**deployment.pids(), "loadgen": os.getpid()})

            tick = _answered(progress)
            progress("warm-up: 300 requests")
            await gen.closed_loop(300, window, lengths, tick)
            progress(f"saturation: {options.requests} requests, window {window}")
            saturated = await _measured(
                meter, lambda: gen.closed_loop(options.requests, window, lengths, tick)
            )
            ran["saturation"] = saturated = _with_window(saturated, window, cores)
            half_rate, half_count = _open_loop(options.open_rate, saturated["samples_per_s"])
            progress(f"open loop: {half_rate:.0f} req/s (Poisson arrivals), {half_count} requests")
            half = await _measured(
                meter, lambda: gen.open_loop(half_count, half_rate, lengths, tick)
            )
            ran["half_load"] = {"rate_rps": half_rate, "arrivals": "poisson", **half}
        finally:
            await gen.stop()
            await deployment.stop()
        outputs = await asyncio.to_thread(answers_checked, version, options.engine, events, gen)
        progress(outputs.line() if outputs is not None else "outputs: not checked (simulated)")
        return {
            "benchmark": "throughput",
            "model": options.model,
            "engine": options.engine,
            "seq_len": options.seq_len,
            "long_share": options.long_share,
            "encoding": options.encoding,
            "tier": options.tier or "interactive (shared ingest topic)",
            "ingest_instances": options.ingest_instances,
            "workers": workers,
            "workers_chosen": workers_why,
            "trace_ratio": options.trace_ratio,
            "span_exports": sink.exports if sink is not None else None,
            "served_intra_op_threads": version.config.engine.intra_op_num_threads,
            "broker_threads": deployment.broker.threads if deployment.broker else None,
            "cores": cores,
            "note": "broker, ingest, worker and load generator share these cores; the raw "
            "engine ran alone, with ONNX Runtime on all cores",
            "raw_engine": raw,
            "saturation": saturated,
            "ratio_e2e_over_raw": ratio_over_raw(
                options.engine,
                saturated["samples_per_s"],
                raw["samples_per_s"],
                raw_kind=raw["kind"],
            ),
            "half_load": {"rate_rps": half_rate, "arrivals": "poisson", **half},
            "outputs": outputs.to_json() if outputs is not None else None,
        }
    finally:
        if sink is not None:
            sink.__exit__(None, None, None)
        shutil.rmtree(models_dir, ignore_errors=True)


def computes_outputs(engine: str, version: ModelVersion) -> bool:
    """Whether the served engine computes the model's outputs: not `null` or `sim` runs,
    nor a model whose own model.yaml names the simulated engine (its outputs are made up)."""
    return engine == "model" and version.config.engine.kind != "sim"


def answers_checked(
    version: ModelVersion, engine: str, events: EncoderEvents, gen: LoadGenerator
) -> OutputCheck | None:
    """The kept answers against a direct ONNX Runtime run; None for a simulated engine."""
    if not computes_outputs(engine, version):
        return None
    kept = [
        Kept(request_id, events.kept[request_id], value)
        for request_id, value in gen.kept_results.items()
    ]
    return check_outputs(
        version.model_file,
        [spec.name for spec in version.config.outputs],
        kept,
        tolerance=FP16_TOLERANCE if version.config.engine.fp16 else TOLERANCE,
    )


def _lengths(options: ThroughputOptions, rng: np.random.Generator) -> Callable[[], int]:
    if options.long_share <= 0:
        return lambda: options.seq_len
    return lambda: options.long_len if rng.random() < options.long_share else options.seq_len

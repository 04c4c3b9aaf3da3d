"""`inferbus bench`: throughput through the bus vs the raw engine, and length buckets."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from schemas.topics import TIERS
from services.cli.common import check_output, check_range, run_service, setup_logging

bench_app = typer.Typer(
    help="Benchmarks that report ratios measured in one run.", no_args_is_help=True
)
console = Console(stderr=True)

MIN_REQUESTS = 10
"""The fewest requests a measured phase takes: `steady_throughput` reads no rate from fewer
answers (and a run then went on at 1 req/s for its half load)."""
ENCODER_MAX_LEN = 512
"""The demo encoder's longest sequence (`services.models.demo`; `bench buckets` serves it)."""
MAX_OPEN_RATE = 100_000
"""The highest --open-rate: the open loop sends 10 s of it, every arrival drawn up front."""


def _progress(message: str) -> None:
    console.print(f"[dim]bench[/dim] {escape(message)}")


INTERRUPTED = 130
"""Exit status after Ctrl-C, as a shell reports a command SIGINT ended."""
PHASES = ("raw_engine", "saturation", "half_load", "with_buckets", "one_bucket")
"""The report keys that hold a measured phase."""


def _interrupted(ran: dict[str, Any], json_out: Path | None) -> NoReturn:
    """Ctrl-C: write what ran in full (the JSON says it was cut short), exit 130. The stack
    was stopped by the bench's own clean-up as the interrupt unwound it."""
    done = [key for key in PHASES if key in ran]
    ran["interrupted"] = (
        f"Ctrl-C; phases measured in full: {', '.join(done) or 'none'} (the rest did not run)"
    )
    _progress(f"interrupted (Ctrl-C) after: {', '.join(done) or 'no phase'}")
    _write(ran, json_out)
    raise typer.Exit(INTERRUPTED)


def check_model(model: str, models: Path | None) -> None:
    """Refuse a --model the run could not serve: not in --models (or, without it, not a demo
    model), or not taking the load generator's `input_ids` and `attention_mask`."""
    from infra.models.repository import ModelRepository
    from schemas.errors import ModelNotFound
    from services.models.demo import ENCODER

    if models is None:
        if model != ENCODER:
            raise typer.BadParameter(
                f"--model {model!r}: without --models the bench serves the demo model "
                f"{ENCODER}; pass --models DIR for another"
            )
        return
    if not models.is_dir():
        raise typer.BadParameter(f"--models {models} is not a folder")
    repository = ModelRepository(models)
    try:
        config = repository.config(model)
    except ModelNotFound:
        held = ", ".join(repository.names()) or "no model"
        raise typer.BadParameter(
            f"--model {model!r} is not in --models {models} (it holds: {held})"
        ) from None
    inputs = {spec.name for spec in config.inputs}
    if not {"input_ids", "attention_mask"} <= inputs:
        raise typer.BadParameter(
            f"--model {model!r} takes {', '.join(sorted(inputs))}: the bench sends token "
            "input_ids and attention_mask (an encoder)"
        )


def _write(report: dict[str, Any], json_out: Path | None) -> None:
    text = json.dumps(report, indent=2)
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(text + "\n")
        _progress(f"wrote {json_out}")


@bench_app.command("throughput")
def throughput(
    model: Annotated[str, typer.Option(help="Model to serve.")] = "demo-encoder",
    seq: Annotated[int, typer.Option(help="Tokens per request.", min=1)] = 32,
    requests: Annotated[
        int,
        typer.Option(
            help="Requests in the saturation phase (at least 10: fewer give no steady rate).",
            min=MIN_REQUESTS,
        ),
    ] = 3000,
    window: Annotated[
        int | None,
        typer.Option(
            help="Requests kept outstanding at saturation (default: enough to fill what every "
            "worker takes in hand, workers x (engine_queue_depth + prefetch_batches) x "
            "max_batch_size, at least 128).",
            min=1,
        ),
    ] = None,
    engine: Annotated[
        str,
        typer.Option(
            help="model (as model.yaml says), null (no work: the bus ceiling) or sim "
            "(model.yaml's engine.sim times: the bus at the model's rate, no engine CPU)."
        ),
    ] = "model",
    intra_op_threads: Annotated[
        int | None,
        typer.Option(help="Served engine's ONNX Runtime threads (0: all cores).", min=0),
    ] = None,
    ingest: Annotated[int, typer.Option(help="Ingest instances.", min=1)] = 1,
    workers: Annotated[
        int | None,
        typer.Option(
            help="Worker processes (default: one per core / the engine's intra-op threads "
            "when it runs on the CPU, else 1).",
            min=1,
        ),
    ] = None,
    encoding: Annotated[str, typer.Option(help="Request form: frame, b64 or list.")] = "frame",
    trace_ratio: Annotated[
        float | None,
        typer.Option(
            help="Export spans to a local sink at this sampling ratio, 0 to 1 (default: off)."
        ),
    ] = None,
    bootstrap: Annotated[
        str | None, typer.Option(help="Use this Kafka, not the embedded one.")
    ] = None,
    models: Annotated[
        Path | None, typer.Option(help="Model repository (default: fresh demo models).")
    ] = None,
    tier: Annotated[
        str | None,
        typer.Option(
            help="Send to this tier's ingest topic, served by workers of that tier (default: "
            "the shared ingest topic, interactive requests)."
        ),
    ] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the report here.")] = None,
    plot: Annotated[Path | None, typer.Option(help="Write a PNG plot here.")] = None,
    open_rate: Annotated[
        float | None,
        typer.Option(
            help="Open-loop phase rate, req/s, Poisson arrivals, at most "
            f"{MAX_OPEN_RATE:,} (default: half the saturated rate)."
        ),
    ] = None,
) -> None:
    """Raw engine samples/s (all cores), then end to end at saturation and at half load.

    Prints the ratio, latency, and each process's CPU per request (its own counters).
    """
    from services.bench.outputs import check_failure
    from services.bench.plot import plot_throughput
    from services.bench.throughput import ThroughputOptions, bench_throughput

    if engine not in ("model", "null", "sim"):
        raise typer.BadParameter(f"--engine must be model, null or sim, got {engine!r}")
    if open_rate is not None:
        check_range(open_rate, "--open-rate", low=0, high=MAX_OPEN_RATE, above=True)
    if trace_ratio is not None:
        check_range(trace_ratio, "--trace-ratio", low=0, high=1)
    if encoding not in ("frame", "b64", "list"):
        raise typer.BadParameter(f"--encoding must be frame, b64 or list, got {encoding!r}")
    if tier is not None and tier not in TIERS:
        raise typer.BadParameter(f"--tier must be one of {', '.join(TIERS)}, got {tier!r}")
    check_model(model, models)
    check_output(json_out, "--json")
    check_output(plot, "--plot")
    setup_logging("WARNING")
    options = ThroughputOptions(
        model=model,
        seq_len=seq,
        requests=requests,
        window=window,
        bootstrap=bootstrap,
        models_dir=models,
        engine=engine,
        intra_op_threads=intra_op_threads,
        ingest_instances=ingest,
        workers=workers,
        encoding=encoding,
        trace_ratio=trace_ratio,
        open_rate=open_rate,
        tier=tier,
    )
    ran: dict[str, Any] = {}
    try:
        report = asyncio.run(bench_throughput(options, _progress, ran))
    except KeyboardInterrupt:
        _interrupted(ran, json_out)
    _write(report, json_out)
    if plot is not None:
        plot_throughput(report, plot)
        _progress(f"wrote {plot}")
    for line in throughput_summary(report, open_loop=open_rate is not None):
        typer.echo(line)
    failure = check_failure(report["outputs"])
    if failure is not None:
        # Fast wrong (or unchecked) answers are no throughput: the run fails, its report
        # written all the same.
        typer.echo(f"error: {failure}", err=True)
        raise typer.Exit(1)


def _num(value: float | None, spec: str, unit: str = "") -> str:
    """A figure as `spec` formats it, or `-` where the phase had none (no answer ok)."""
    return "-" if value is None else f"{value:{spec}}{unit}"


def _headline(report: dict[str, Any]) -> str:
    raw_rate = report["raw_engine"]["samples_per_s"]
    e2e = report["saturation"]["samples_per_s"]
    ratio = report["ratio_e2e_over_raw"]
    if report["engine"] == "null":
        return f"bus ceiling (null engine) {e2e:.0f} req/s"
    if ratio is None:
        kind = report["raw_engine"].get("kind", report["engine"])
        return (
            f"one {kind} engine {raw_rate:.0f} samples/s | end to end {e2e:.0f} samples/s "
            f"through {report['workers']} worker(s) (no ratio: the raw run is no ONNX Runtime)"
        )
    return (
        f"raw engine {raw_rate:.0f} samples/s | end to end {e2e:.0f} samples/s | ratio {ratio:.2f}"
    )


def throughput_summary(report: dict[str, Any], *, open_loop: bool) -> list[str]:
    """What `bench throughput` prints of its report; a phase without an ok answer reads `-`
    and its statuses are named."""
    sat, half = report["saturation"], report["half_load"]
    cpu = ", ".join(f"{k} {v:.3f}" for k, v in sat["cpu"]["cpu_ms_per_request"].items())
    shares = " / ".join(str(w["answered"]) for w in sat["by_worker"].values()) or "none"
    lines = [
        f"{_headline(report)} | saturation p99 e2e {_num(sat['e2e_ms']['p99'], '.0f', ' ms')} | "
        f"{'open loop' if open_loop else 'half load'} ({half['rate_rps']:.0f} req/s) "
        f"p50 e2e-engine {_num(half['overhead_ms']['p50'], '.1f', ' ms')}, "
        f"p99 e2e {_num(half['e2e_ms']['p99'], '.0f', ' ms')}",
        f"CPU ms per request at saturation: {cpu} | cores busy "
        f"{sat['cpu']['machine_cores_busy']:.2f}",
        f"at saturation, {sat['window']} outstanding, answered by each worker: {shares}",
    ]
    for name, phase in (("saturation", sat), ("half load", half)):
        failed = {status: n for status, n in phase["statuses"].items() if status != "ok"}
        unanswered = phase["sent"] - phase["answered"]
        if failed or unanswered:
            lines.append(
                f"not ok at {name}: {failed or 'none failed'}, {unanswered} of {phase['sent']} "
                "unanswered"
            )
    if sat.get("window_bound"):
        lines.append(f"note: {sat['window_bound']}")
    return lines


@bench_app.command("idle")
def idle(
    settle: Annotated[float, typer.Option(help="Seconds to settle after start.")] = 40.0,
    window: Annotated[float, typer.Option(help="Seconds of measured quiet.")] = 60.0,
    probes: Annotated[int, typer.Option(help="Single requests after each quiet gap.", min=1)] = 3,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the report here.")] = None,
) -> None:
    """CPU of an idle `inferbus up` per process, then the e2e of requests after quiet gaps."""
    from services.bench.idle import IdleOptions, bench_idle

    check_range(settle, "--settle", low=0)
    check_range(window, "--window", low=0, above=True)
    check_output(json_out, "--json")
    setup_logging("WARNING")
    # This process stands in for `inferbus up` (its "inferbus-up" row): the same loop and GC.
    report = run_service(
        bench_idle(IdleOptions(settle_s=settle, window_s=window, probes=probes), _progress)
    )
    _write(report, json_out)

    def probes_line(key: str) -> str:
        return ", ".join(
            f"{gap}: p50 {p['p50']:.0f} ms max {max(p['e2e_ms']):.0f} ms"
            for gap, p in report[key].items()
        )

    typer.echo(
        f"idle inferbus up: {report['inferbus_cores_busy']:.3f} cores busy (machine "
        f"{report['machine_cores_busy']:.3f}) | first requests "
        f"{probes_line('first_request_after_quiet')} | batch "
        f"{probes_line('first_batch_request_after_quiet')}"
    )


def buckets_summary(report: dict[str, Any]) -> tuple[str, str | None]:
    """What `bench buckets` prints, and why the run failed (None: it did not): a side with
    no steady rate (fewer than 10 answers ok) has no speedup to give."""
    with_buckets, one_bucket = report["with_buckets"], report["one_bucket"]
    line = (
        f"with buckets {with_buckets['samples_per_s']:.0f} req/s | one bucket "
        f"{one_bucket['samples_per_s']:.0f} req/s | speedup " + _num(report["speedup"], ".2f", "x")
    )
    empty = [
        f"{name} ({phase['statuses'] or 'no answer'} of {phase['sent']} sent)"
        for name, phase in (("with buckets", with_buckets), ("one bucket", one_bucket))
        if not phase["samples_per_s"]
    ]
    failure = f"no steady rate: {', '.join(empty)}" if empty else None
    return line, failure


@bench_app.command("buckets")
def buckets(
    requests: Annotated[
        int,
        typer.Option(help="Requests per variant (at least 10).", min=MIN_REQUESTS),
    ] = 1500,
    window: Annotated[int, typer.Option(help="Requests kept outstanding.", min=1)] = 128,
    short: Annotated[
        int, typer.Option(help="Short request tokens.", min=1, max=ENCODER_MAX_LEN)
    ] = 32,
    long: Annotated[
        int, typer.Option(help="Long request tokens.", min=1, max=ENCODER_MAX_LEN)
    ] = 512,
    long_share: Annotated[float, typer.Option(help="Share of long requests, 0 to 1.")] = 0.1,
    bootstrap: Annotated[
        str | None, typer.Option(help="Use this Kafka, not the embedded one.")
    ] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the report here.")] = None,
    plot: Annotated[Path | None, typer.Option(help="Write a PNG plot here.")] = None,
) -> None:
    """Throughput of a short/long mix with length buckets vs one bucket."""
    from services.bench.buckets import bench_buckets
    from services.bench.plot import plot_buckets

    check_range(long_share, "--long-share", low=0, high=1)
    check_output(json_out, "--json")
    check_output(plot, "--plot")
    setup_logging("WARNING")
    ran: dict[str, Any] = {}
    try:
        report = asyncio.run(
            bench_buckets(
                requests=requests,
                window=window,
                short_len=short,
                long_len=long,
                long_share=long_share,
                bootstrap=bootstrap,
                progress=_progress,
                ran=ran,
            )
        )
    except KeyboardInterrupt:
        _interrupted(ran, json_out)
    _write(report, json_out)
    if plot is not None:
        plot_buckets(report, plot)
        _progress(f"wrote {plot}")
    line, failure = buckets_summary(report)
    typer.echo(line)
    if failure is not None:
        typer.echo(f"error: {failure}", err=True)
        raise typer.Exit(1)


@bench_app.command("scale-step")
def scale_step(
    low: Annotated[float, typer.Option(help="Low rate, req/s (before and after the step).")] = 25.0,
    high: Annotated[float, typer.Option(help="Step rate, req/s.")] = 175.0,
    before: Annotated[float, typer.Option(help="Seconds at the low rate first.")] = 30.0,
    step: Annotated[float, typer.Option(help="Seconds at the step rate.")] = 90.0,
    after: Annotated[float, typer.Option(help="Seconds at the low rate after.")] = 60.0,
    interval: Annotated[float, typer.Option(help="Scaler collection interval, s.")] = 2.0,
    scale_down_window: Annotated[
        float, typer.Option(help="Scale-down stabilisation window, s.")
    ] = 30.0,
    slo_ms: Annotated[float, typer.Option(help="Interactive p99 e2e SLO, ms.")] = 1000.0,
    max_replicas: Annotated[int, typer.Option(help="replicas.max of the sim model.")] = 8,
    kill: Annotated[
        float,
        typer.Option(
            help="Seconds more at the step rate after the step, in which the worker owning "
            "the most partitions is SIGKILLed (0: no kill phase)."
        ),
    ] = 30.0,
    kill_at: Annotated[float, typer.Option(help="When the kill comes, s into that phase.")] = 5.0,
    sim_dir: Annotated[
        Path | None,
        typer.Option(help="Write the arrivals, model.yaml and policy that `inferbus sim` replays."),
    ] = None,
    bootstrap: Annotated[
        str | None, typer.Option(help="Use this Kafka, not the embedded one.")
    ] = None,
    keep_logs: Annotated[bool, typer.Option(help="Keep the worker/ingest logs.")] = False,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the report here.")] = None,
    plot: Annotated[Path | None, typer.Option(help="Write a PNG plot here.")] = None,
    from_json: Annotated[
        Path | None,
        typer.Option(help="Run nothing: analyse again what an earlier report recorded."),
    ] = None,
) -> None:
    """The live scaler under a load step: reaction, readiness, lag drain, answers, SLO;
    each partition's longest gap in service through every membership change and a killed
    worker; the simulator on the same step beside it."""
    from services.bench.scale_step import bench_scale_step
    from services.bench.step_analysis import summary_line
    from services.bench.step_build import build_report
    from services.bench.step_plot import plot_scale_step
    from services.bench.step_report import handover_lines
    from services.bench.step_schedule import ScaleStepOptions

    setup_logging("WARNING")
    options = ScaleStepOptions(
        low_rps=low,
        high_rps=high,
        before_s=before,
        step_s=step,
        after_s=after,
        interval_s=interval,
        scale_down_window_s=scale_down_window,
        slo_p99_ms=slo_ms,
        max_replicas=max_replicas,
        kill_s=kill,
        kill_at_s=kill_at,
        bootstrap=bootstrap,
        keep_logs=keep_logs,
        sim_dir=str(sim_dir) if sim_dir is not None else None,
    )
    if from_json is not None:
        earlier = json.loads(from_json.read_text())
        if "raw" not in earlier:
            raise typer.BadParameter(
                f"{from_json} holds a summary without the run's raw records (the copies in "
                "docs/bench are saved that way): analyse the full JSON the run wrote",
                param_hint="--from-json",
            )
        options = ScaleStepOptions(**earlier["options"])
        if sim_dir is not None:
            options = dataclasses.replace(options, sim_dir=str(sim_dir))
        report = build_report(earlier["raw"], options)
    else:
        report = asyncio.run(bench_scale_step(options, _progress))
    _write(report, json_out)
    if plot is not None:
        plot_scale_step(report, plot)
        _progress(f"wrote {plot}")
    typer.echo(summary_line(report))
    for line in handover_lines(report):
        typer.echo(line)
    if report["sim"].get("command"):
        typer.echo(f"simulated the same step with: {report['sim']['command']}")

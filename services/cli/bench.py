"""`inferbus bench`: throughput through the bus vs the raw engine, and length buckets."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from schemas.topics import TIERS
from services.cli.common import run_service, setup_logging

bench_app = typer.Typer(
    help="Benchmarks that report ratios measured in one run.", no_args_is_help=True
)
console = Console(stderr=True)


def _progress(message: str) -> None:
    console.print(f"[dim]bench[/dim] {escape(message)}")


def _write(report: dict[str, Any], json_out: Path | None) -> None:
    text = json.dumps(report, indent=2)
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(text + "\n")
        _progress(f"wrote {json_out}")


@bench_app.command("throughput")
def throughput(
    model: Annotated[str, typer.Option(help="Model to serve.")] = "demo-encoder",
    seq: Annotated[int, typer.Option(help="Tokens per request.")] = 32,
    requests: Annotated[int, typer.Option(help="Requests in the saturation phase.")] = 3000,
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
        int | None, typer.Option(help="Served engine's ONNX Runtime threads (0: all cores).")
    ] = None,
    ingest: Annotated[int, typer.Option(help="Ingest instances.")] = 1,
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
        typer.Option(help="Export spans to a local sink at this sampling ratio (default: off)."),
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
            help="Open-loop phase rate, req/s, Poisson arrivals (default: half the saturated rate)."
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
    if open_rate is not None and open_rate <= 0:
        raise typer.BadParameter(f"--open-rate must be > 0 req/s, got {open_rate}")
    if encoding not in ("frame", "b64", "list"):
        raise typer.BadParameter(f"--encoding must be frame, b64 or list, got {encoding!r}")
    if tier is not None and tier not in TIERS:
        raise typer.BadParameter(f"--tier must be one of {', '.join(TIERS)}, got {tier!r}")
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
    report = asyncio.run(bench_throughput(options, _progress))
    _write(report, json_out)
    if plot is not None:
        plot_throughput(report, plot)
        _progress(f"wrote {plot}")
    sat, half = report["saturation"], report["half_load"]
    cpu = ", ".join(f"{k} {v:.3f}" for k, v in sat["cpu"]["cpu_ms_per_request"].items())
    raw_rate, e2e = report["raw_engine"]["samples_per_s"], sat["samples_per_s"]
    shares = " / ".join(str(w["answered"]) for w in sat["by_worker"].values())
    if engine == "null":
        headline = f"bus ceiling (null engine) {e2e:.0f} req/s"
    elif engine == "sim":
        headline = (
            f"one sim engine {raw_rate:.0f} samples/s | end to end {e2e:.0f} samples/s "
            f"through {report['workers']} worker(s) (no ratio: the raw run is no ONNX Runtime)"
        )
    else:
        headline = (
            f"raw engine {raw_rate:.0f} samples/s | end to end {e2e:.0f} samples/s | "
            f"ratio {report['ratio_e2e_over_raw']:.2f}"
        )
    typer.echo(
        f"{headline} | saturation p99 e2e {sat['e2e_ms']['p99']:.0f} ms | "
        f"{'half load' if open_rate is None else 'open loop'} ({half['rate_rps']:.0f} req/s) "
        "p50 e2e-engine "
        f"{half['overhead_ms']['p50']:.1f} ms, p99 e2e {half['e2e_ms']['p99']:.0f} ms\n"
        f"CPU ms per request at saturation: {cpu} | cores busy "
        f"{sat['cpu']['machine_cores_busy']:.2f}\n"
        f"at saturation, {sat['window']} outstanding, answered by each worker: {shares}"
    )
    if sat.get("window_bound"):
        typer.echo(f"note: {sat['window_bound']}")
    failure = check_failure(report["outputs"])
    if failure is not None:
        # Fast wrong (or unchecked) answers are no throughput: the run fails, its report
        # written all the same.
        typer.echo(f"error: {failure}", err=True)
        raise typer.Exit(1)


@bench_app.command("idle")
def idle(
    settle: Annotated[float, typer.Option(help="Seconds to settle after start.")] = 40.0,
    window: Annotated[float, typer.Option(help="Seconds of measured quiet.")] = 60.0,
    probes: Annotated[int, typer.Option(help="Single requests after each quiet gap.")] = 3,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the report here.")] = None,
) -> None:
    """CPU of an idle `inferbus up` per process, then the e2e of requests after quiet gaps."""
    from services.bench.idle import IdleOptions, bench_idle

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


@bench_app.command("buckets")
def buckets(
    requests: Annotated[int, typer.Option(help="Requests per variant.")] = 1500,
    window: Annotated[int, typer.Option(help="Requests kept outstanding.")] = 128,
    short: Annotated[int, typer.Option(help="Short request tokens.")] = 32,
    long: Annotated[int, typer.Option(help="Long request tokens.")] = 512,
    long_share: Annotated[float, typer.Option(help="Share of long requests.")] = 0.1,
    bootstrap: Annotated[
        str | None, typer.Option(help="Use this Kafka, not the embedded one.")
    ] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the report here.")] = None,
    plot: Annotated[Path | None, typer.Option(help="Write a PNG plot here.")] = None,
) -> None:
    """Throughput of a short/long mix with length buckets vs one bucket."""
    from services.bench.buckets import bench_buckets
    from services.bench.plot import plot_buckets

    setup_logging("WARNING")
    report = asyncio.run(
        bench_buckets(
            requests=requests,
            window=window,
            short_len=short,
            long_len=long,
            long_share=long_share,
            bootstrap=bootstrap,
            progress=_progress,
        )
    )
    _write(report, json_out)
    if plot is not None:
        plot_buckets(report, plot)
    speedup = report["speedup"]
    typer.echo(
        f"with buckets {report['with_buckets']['samples_per_s']:.0f} req/s | one bucket "
        f"{report['one_bucket']['samples_per_s']:.0f} req/s | speedup "
        f"{speedup:.2f}x"
        if speedup
        else "one-bucket run answered nothing"
    )


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

"""`inferbus load`: a scenario, a trace or a steady rate against a running stack."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from schemas.errors import ModelNotFound
from schemas.topics import RESULTS, TIERS, Tier
from services.cli.common import run, setup_logging
from services.load.driver import LoadError, RunOptions, Status

console = Console(stderr=True)

_STAGES = ("ingest", "queue", "batch_wait", "infer", "wait", "engine", "e2e")


def _tiers(value: str) -> list[Tier]:
    tiers = [t.strip() for t in value.split(",") if t.strip()]
    unknown = [t for t in tiers if t not in TIERS]
    if unknown or not tiers or len(set(tiers)) != len(tiers):
        raise LoadError(f"--tiers must be distinct tiers from {', '.join(TIERS)}; got {value!r}")
    return tiers  # type: ignore[return-value]


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _summary_table(report: dict[str, Any]) -> Table:
    table = Table(title=f"{report['workload']['source']} on {report['model']}")
    for column in ("tier", "sent", "ok", "errors", "lost", "p50 ms", "p95 ms", "p99 ms", "SLO"):
        table.add_column(column, justify="left" if column in ("tier", "errors") else "right")
    for tier, t in report["tiers"].items():
        errors = ", ".join(f"{s} {n}" for s, n in t["errors"].items()) or "-"
        lost = f"[red]{t['lost']}[/red]" if t["lost"] else "0"
        e2e = t["e2e_ms"]
        table.add_row(
            tier, str(t["sent"]), str(t["ok"]), errors, lost,
            _ms(e2e["p50"]), _ms(e2e["p95"]), _ms(e2e["p99"]), _ms(t["slo_p99_e2e_ms"]),
        )  # fmt: skip
    return table


def _stage_table(report: dict[str, Any]) -> Table:
    table = Table(
        title="stages of ok requests, ms (p50 / p99); wait = queue + batch wait, engine = "
        "pre + infer + post"
    )
    table.add_column("tier")
    for stage in _STAGES:
        table.add_column(stage, justify="right")
    for tier, t in report["tiers"].items():
        cells = [
            f"{_ms(t['stages_ms'][s]['p50'])} / {_ms(t['stages_ms'][s]['p99'])}" for s in _STAGES
        ]
        table.add_row(tier, *cells)
    return table


def _print_checks(report: dict[str, Any]) -> None:
    out = Console()
    for check in report["checks"]:
        mark = {True: "[green]✓[/green]", False: "[red]✗[/red]", None: "[cyan]·[/cyan]"}
        out.print(f"{mark[check['ok']]} {check['name']}: {check['detail']}")


class _Bar:
    """The live progress line: sent against the schedule, then answers coming in."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.task: TaskID | None = None
        self.stage = ""

    def __call__(self, status: Status) -> None:
        if self.task is None:
            if status.scheduled == 0:
                if status.stage != self.stage:
                    self.stage = status.stage
                    self.progress.console.print(f"[dim]load[/dim] {escape(status.stage)}…")
                return
            self.task = self.progress.add_task("sending", total=status.scheduled, counts="")
        done = status.sent if status.stage == "sending" else status.answered
        self.progress.update(
            self.task,
            completed=done,
            description=f"{status.stage:<7} t={status.t_s:5.0f}s",
            counts=(
                f"sent {status.sent}/{status.scheduled} answered {status.answered} "
                f"errors {status.errors} waiting {status.outstanding} lost {status.lost}"
            ),
        )


def load_command(  # noqa: PLR0917 (typer maps each option to a parameter)
    scenario: Annotated[
        str | None,
        typer.Option(help="burst | long-context | mixed | warmup (see docs/operations.md)."),
    ] = None,
    trace: Annotated[
        Path | None, typer.Option(help="Replay a CSV: TIMESTAMP,ContextTokens,GeneratedTokens.")
    ] = None,
    rate: Annotated[
        float | None, typer.Option(help="Steady Poisson load, requests/s over all --tiers.")
    ] = None,
    duration: Annotated[
        float | None,
        typer.Option(help="Seconds: of --rate load (default 60) or of the trace (default 120)."),
    ] = None,
    rate_scale: Annotated[
        float, typer.Option(help="Multiply a scenario's or trace's arrival rate.")
    ] = 1.0,
    tiers: Annotated[str, typer.Option(help="Tiers of --rate / --trace load.")] = "interactive",
    tokens: Annotated[int, typer.Option(help="Input length of --rate requests, tokens.")] = 64,
    trace_start: Annotated[float, typer.Option(help="Seconds into the trace to start.")] = 0.0,
    token_scale: Annotated[
        float, typer.Option(help="Trace context tokens × this = input length (clipped).")
    ] = 0.125,
    model: Annotated[str, typer.Option("--model", "-m", help="Model to load.")] = "demo-encoder",
    bootstrap: Annotated[
        str,
        typer.Option(
            "--bootstrap", "-b", envvar="INFERBUS_KAFKA_BOOTSTRAP", help="Kafka host:port."
        ),
    ] = "127.0.0.1:9092",
    models: Annotated[
        Path, typer.Option(help="Model repository the requests are built from (the stack's).")
    ] = Path("models"),
    tenant: Annotated[str, typer.Option(help="Tenant named in every request.")] = "inferbus-load",
    reply_to: Annotated[
        str, typer.Option(help="Topic the results come back on (it must exist).")
    ] = RESULTS,
    grace: Annotated[
        float, typer.Option(help="Seconds past a request's deadline before it counts as lost.")
    ] = 10.0,
    out: Annotated[
        Path | None, typer.Option(help="Folder for report.json and timeline.png.")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the arrivals and inputs.")] = 1,
    predict: Annotated[
        bool, typer.Option(help="Run the simulator on the same arrivals, for comparison.")
    ] = True,
) -> None:
    """Open-loop load over the bus; per tier: sent, ok, errors, lost, latency; JSON + PNG.

    Exit 1 when a request is lost or the scenario's expected shape is not met.
    """
    from infra.models.repository import ModelRepository
    from services.load.events import max_input_tokens
    from services.load.plot import plot_report
    from services.load.report import write_arrivals_csv
    from services.load.run import LoadSpec, run_load
    from services.load.scenarios import SCENARIOS, rate_workload, scenario_workload
    from services.load.trace import trace_workload

    setup_logging("WARNING", kafka_level="CRITICAL")
    if sum(x is not None for x in (scenario, trace, rate)) != 1:
        raise LoadError("give exactly one of --scenario NAME, --trace FILE or --rate R")
    if scenario is not None and duration is not None:
        raise LoadError(
            f"--duration applies to --rate and --trace; scenario {scenario!r} has its own "
            "length (scale it with --rate-scale, or run --rate R --duration S)"
        )
    if duration is not None and not duration > 0:
        raise LoadError(f"--duration must be > 0 seconds, not {duration:g}")
    try:
        config = ModelRepository(models).config(model)
    except ModelNotFound:
        raise LoadError(
            f"model {model!r} is not in the model repository {models}/ (requests are built "
            "from its model.yaml): pass --models DIR (the stack's) or another --model"
        ) from None
    if scenario is not None:
        workload = scenario_workload(scenario, rate_scale=rate_scale, seed=seed)
    elif trace is not None:
        workload = trace_workload(
            trace, start_s=trace_start, duration_s=120.0 if duration is None else duration,
            rate_scale=rate_scale, token_scale=token_scale, max_tokens=max_input_tokens(config),
            tiers=_tiers(tiers), seed=seed,
        )  # fmt: skip
    else:
        assert rate is not None
        workload = rate_workload(
            rate * rate_scale,
            60.0 if duration is None else duration,
            _tiers(tiers),
            tokens=tokens,
            seed=seed,
        )
    folder = out or Path("bench-out/load") / f"{workload.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    folder.mkdir(parents=True, exist_ok=True)
    console.print(
        f"[bold]load[/bold] {escape(workload.source)}: {workload.total()} requests over "
        f"{workload.duration_s:.0f} s to {model} at {bootstrap}"
    )
    spec = LoadSpec(
        workload=workload,
        config=config,
        options=RunOptions(
            bootstrap=bootstrap, tenant=tenant, reply_to=reply_to, grace_s=grace, seed=seed
        ),
        scenario=SCENARIOS.get(scenario) if scenario else None,
        with_prediction=predict,
    )
    columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[counts]}"))
    with Progress(*columns, TimeElapsedColumn(), console=console) as progress:
        report = run(run_load(spec, _Bar(progress)))
    (folder / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    plot_report(report, folder / "timeline.png")
    arrivals = write_arrivals_csv(workload, folder)
    out_console = Console()
    out_console.print(_summary_table(report))
    out_console.print(_stage_table(report))
    for status, message in report["totals"]["error_samples"].items():
        out_console.print(f"{status}, e.g.: {message}", markup=False)
    _print_checks(report)
    host = report["host"]
    out_console.print(
        f"this machine: {host['cpus']} CPUs, load average {host['load_avg_1m_before']} before, "
        f"{host['load_avg_1m_after']} after (the stack shares them with everything else)"
    )
    out_console.print(
        f"wrote {folder / 'report.json'}, {folder / 'timeline.png'}, "
        f"{', '.join(p.name for p in arrivals)}"
    )
    sim = report["sim_inputs"]
    out_console.print(
        f"the simulator alone on these arrivals: inferbus sim --policy slo --trace "
        f"{arrivals[0]} --tiers {next(iter(workload.tiers))} --model-yaml "
        f"{models / model / 'model.yaml'} --time-to-ready-s {sim['time_to_ready_s']:.1f} "
        f"--partitions {sim['partitions']} --max-total-replicas {config.replicas.max}",
        markup=False,
        soft_wrap=True,
    )
    if any(check["ok"] is False for check in report["checks"]):
        raise typer.Exit(1)

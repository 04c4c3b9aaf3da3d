"""`inferbus load`: a scenario, a trace or a steady rate against a running stack."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from schemas.errors import ModelNotFound
from schemas.topics import RESULTS, Tier, parse_tiers
from services.cli.common import run, setup_logging
from services.load import limits
from services.load.driver import INTERRUPT_WAIT_S, LoadError, RunOptions, Status

if TYPE_CHECKING:
    from infra.models.config import ModelConfig
    from scaler.sim.workload import Workload

console = Console(stderr=True)

_STAGES = ("ingest", "queue", "batch_wait", "infer", "wait", "engine", "e2e")
_APPLIES: dict[str, tuple[str, ...]] = {
    "--duration": ("rate", "trace"),
    "--tiers": ("rate", "trace"),
    "--tokens": ("rate",),
    "--trace-start": ("trace",),
    "--token-scale": ("trace",),
}
"""Which workload source each option shapes; given with another it would be ignored."""


def _tiers(value: str) -> list[Tier]:
    try:
        return parse_tiers(value)
    except ValueError as exc:
        raise LoadError(f"--tiers {exc}") from exc


def _source(
    scenario: str | None, trace: Path | None, rate: float | None, duration: float | None
) -> str:
    """Which workload the run sends: scenario, trace or rate (exactly one given)."""
    if sum(x is not None for x in (scenario, trace, rate)) != 1:
        raise LoadError("give exactly one of --scenario NAME, --trace FILE or --rate R")
    if scenario is not None and duration is not None:
        raise LoadError(
            f"--duration applies to --rate and --trace; scenario {scenario!r} has its own "
            "length (scale it with --rate-scale, or run --rate R --duration S)"
        )
    return "scenario" if scenario is not None else "trace" if trace is not None else "rate"


def _refuse_unused(source: str, given: dict[str, bool]) -> None:
    """Refuse an option the chosen source (scenario, trace, rate) would silently ignore."""
    for flag, sources in _APPLIES.items():
        if given.get(flag) and source not in sources:
            allowed = " and ".join(f"--{s}" for s in sources)
            raise LoadError(f"{flag} applies to {allowed} only, not to --{source}")


def _check_reply_to(reply_to: str) -> None:
    from schemas.topics import is_reply_topic

    if not is_reply_topic(reply_to):
        raise LoadError(
            f"--reply-to {reply_to!r} is not a topic results may go to ({RESULTS}.<name>, or "
            "a legal topic outside inferbus.*)"
        )


def _check_numbers(
    *,
    rate: float | None,
    rate_scale: float,
    duration: float | None,
    grace: float,
    seed: int,
    tokens: int | None,
) -> None:
    """Refuse numbers that are not finite or out of range before anything is built."""
    if rate is not None:
        limits.positive("--rate", rate, " requests/s")
    limits.positive("--rate-scale", rate_scale)
    if duration is not None:
        limits.duration("--duration", duration)
    limits.non_negative("--grace", grace, " seconds")
    if seed < 0:
        raise LoadError(f"--seed must be >= 0, not {seed}")
    if tokens is not None and tokens < 1:
        raise LoadError(f"--tokens must be >= 1, not {tokens}")


def _check_tokens(tokens: int | None, config: ModelConfig) -> None:
    """Refuse --tokens longer than the model takes, or for a model without a sequence."""
    from services.load.events import max_input_tokens, sequence_length_input

    if tokens is None:
        return
    if sequence_length_input(config) is None:
        raise LoadError(
            f"--tokens applies to a model with a sequence input; {config.name} has none"
        )
    top = max_input_tokens(config)
    if tokens > top:
        raise LoadError(
            f"--tokens {tokens} is longer than {config.name} takes: at most {top} tokens "
            "(its largest length bucket, else its tokenizer's max_length); every request "
            "would be answered invalid_input"
        )


def _scenario(name: str, config: ModelConfig, *, rate_scale: float, seed: int) -> Workload:
    """A live scenario's arrivals, inputs no longer than the model takes (and said so)."""
    from services.load.events import max_input_tokens
    from services.load.scenarios import clip_lengths, scenario_workload

    longest = max_input_tokens(config)
    workload, clipped = clip_lengths(
        scenario_workload(name, rate_scale=rate_scale, seed=seed), longest
    )
    if clipped:
        console.print(
            f"[yellow]{clipped:,} of {name}'s inputs are longer than {config.name} takes; "
            f"sent at its longest, {longest} tokens[/yellow]"
        )
    return workload


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _summary_table(report: dict[str, Any]) -> Table:
    stopped = report.get("interrupted_at_s")
    title = f"{report['workload']['source']} on {report['model']}"
    if stopped is not None:
        title += f" [yellow](interrupted at t={stopped:.0f}s)[/yellow]"
    table = Table(title=title)
    columns = ("tier", "sent", "ok", "errors", "lost", "pending", "p50 ms", "p95 ms", "p99 ms")
    for column in (*columns, "SLO"):
        table.add_column(column, justify="left" if column in ("tier", "errors") else "right")
    for tier, t in report["tiers"].items():
        errors = ", ".join(f"{s} {n}" for s, n in t["errors"].items()) or "-"
        lost = f"[red]{t['lost']}[/red]" if t["lost"] else "0"
        e2e = t["e2e_ms"]
        table.add_row(
            tier, str(t["sent"]), str(t["ok"]), escape(errors), lost,
            str(t["unanswered_within_deadline"]), _ms(e2e["p50"]), _ms(e2e["p95"]),
            _ms(e2e["p99"]), _ms(t["slo_p99_e2e_ms"]),
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


def _print_interrupted(report: dict[str, Any]) -> None:
    stopped = report["interrupted_at_s"]
    if stopped is None:
        return
    totals = report["totals"]
    Console().print(
        f"interrupted (Ctrl-C) at t={stopped:.1f}s: sent {totals['sent']} of "
        f"{report['workload']['requests']} scheduled, answered {totals['answered']}, "
        f"still pending {totals['pending']} (not counted lost), lost {totals['lost']}",
        markup=False,
    )


PLAIN_LINE_EVERY_S = 10.0
"""Off a terminal rich draws no live bar: a plain progress line this often instead."""


def _counts(status: Status) -> str:
    return (
        f"sent {status.sent}/{status.scheduled} answered {status.answered} "
        f"errors {status.errors} waiting {status.waiting} lost {status.lost}"
    )


class _Bar:
    """The live progress line: sent against the schedule, then answers coming in.

    Piped or logged, the live bar would stay blank until the end, so a plain line is
    printed every `PLAIN_LINE_EVERY_S` of the run instead."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.task: TaskID | None = None
        self.stage = ""
        self.logs_reread = 0
        self.interrupted = False
        self.plain = not progress.console.is_terminal
        self.next_plain_s = 0.0

    def _say(self, status: Status) -> None:
        """One line for each event worth a line: a restarted reply log, Ctrl-C."""
        if status.logs_reread > self.logs_reread:
            self.logs_reread = status.logs_reread
            self.progress.console.print(
                f"[yellow]load[/yellow] t={status.t_s:.0f}s: the reply topic's log restarted "
                "(the broker came back without its logs): reading it again from its start"
            )
        if status.interrupted and not self.interrupted:
            self.interrupted = True
            self.progress.console.print(
                f"[yellow]load[/yellow] t={status.t_s:.0f}s: Ctrl-C: sending stopped after "
                f"{status.sent} of {status.scheduled}; waiting up to {INTERRUPT_WAIT_S:g} s "
                "for answers (Ctrl-C again quits at once, without a report)"
            )

    def __call__(self, status: Status) -> None:
        self._say(status)
        if self.task is None:
            if status.scheduled == 0:
                if status.stage != self.stage:
                    self.stage = status.stage
                    self.progress.console.print(f"[dim]load[/dim] {escape(status.stage)}…")
                return
            self.task = self.progress.add_task("sending", total=status.scheduled, counts="")
        done = status.sent if status.stage == "sending" else status.answered
        if self.plain and status.t_s >= self.next_plain_s:
            self.next_plain_s = status.t_s + PLAIN_LINE_EVERY_S
            self.progress.console.print(
                f"load {status.stage} t={status.t_s:.0f}s {_counts(status)}",
                markup=False,
                highlight=False,
            )
        self.progress.update(
            self.task,
            completed=done,
            description=f"{status.stage:<7} t={status.t_s:5.0f}s",
            counts=_counts(status),
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
    tiers: Annotated[
        str | None, typer.Option(help="Tiers of --rate / --trace load [default: interactive].")
    ] = None,
    tokens: Annotated[
        int | None,
        typer.Option(
            help="Input length of --rate requests, tokens (at most the model's) [default: 64]."
        ),
    ] = None,
    trace_start: Annotated[
        float | None, typer.Option(help="Seconds into the trace to start [default: 0].")
    ] = None,
    token_scale: Annotated[
        float | None,
        typer.Option(help="Trace context tokens × this = input length (clipped) [default: 0.125]."),
    ] = None,
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
        float,
        typer.Option(help="Seconds past a request's deadline before it counts as lost (>= 0)."),
    ] = 10.0,
    out: Annotated[
        Path | None, typer.Option(help="Folder for report.json and timeline.png.")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the arrivals and inputs (>= 0).")] = 1,
    predict: Annotated[
        bool, typer.Option(help="Run the simulator on the same arrivals, for comparison.")
    ] = True,
) -> None:
    """Open-loop load over the bus; per tier: sent, ok, errors, lost, latency; JSON + PNG.

    Exit 1 when a request is lost, answered with an error other than shedding
    (rejected_overload, deadline_exceeded), or the scenario's expected shape is not met.
    Ctrl-C stops sending, reports what came back, and exits 130.
    """
    from infra.models.repository import ModelRepository
    from services.load.events import max_input_tokens
    from services.load.plot import plot_report
    from services.load.report import write_arrivals_csv
    from services.load.run import LoadSpec, run_load
    from services.load.scenarios import SCENARIOS, rate_workload
    from services.load.trace import trace_workload

    setup_logging("WARNING", kafka_level="CRITICAL")
    source = _source(scenario, trace, rate, duration)
    _refuse_unused(
        source,
        {"--tiers": tiers is not None, "--tokens": tokens is not None,
         "--trace-start": trace_start is not None, "--token-scale": token_scale is not None},
    )  # fmt: skip
    _check_numbers(
        rate=rate, rate_scale=rate_scale, duration=duration, grace=grace, seed=seed, tokens=tokens
    )
    _check_reply_to(reply_to)
    try:
        config = ModelRepository(models).config(model)
    except ModelNotFound:
        raise LoadError(
            f"model {model!r} is not in the model repository {models}/ (requests are built "
            "from its model.yaml): pass --models DIR (the stack's) or another --model"
        ) from None
    _check_tokens(tokens, config)
    if scenario is not None:
        workload = _scenario(scenario, config, rate_scale=rate_scale, seed=seed)
    elif trace is not None:
        workload = trace_workload(
            trace, start_s=trace_start or 0.0, duration_s=120.0 if duration is None else duration,
            rate_scale=rate_scale, token_scale=0.125 if token_scale is None else token_scale,
            max_tokens=max_input_tokens(config), seed=seed,
            tiers=_tiers("interactive" if tiers is None else tiers),
        )  # fmt: skip
    else:
        assert rate is not None
        workload = rate_workload(
            rate * rate_scale,
            60.0 if duration is None else duration,
            _tiers("interactive" if tiers is None else tiers),
            tokens=64 if tokens is None else tokens,
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
    _print_interrupted(report)
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
        f"--partitions {sim['partitions']} --max-total-replicas {sim['max_replicas']}",
        markup=False,
        soft_wrap=True,
    )
    if report["interrupted_at_s"] is not None:
        raise typer.Exit(130)
    if any(check["ok"] is False for check in report["checks"]):
        raise typer.Exit(1)

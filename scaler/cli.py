"""`inferbus scaler decide` and `inferbus sim`: run a policy on a snapshot, or in simulation."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import Progress

from infra.files import output_problem
from scaler.config import PolicyConfig, load_config
from scaler.policy import POLICIES
from scaler.signals import SignalsError
from scaler.sim.params import ServiceModel, SimParams, read_service_model
from scaler.sim.report import (
    PhaseCheck,
    compare,
    finite_or_null,
    table,
    write_json,
)
from scaler.sim.scenarios import SCENARIOS, scenario
from scaler.sim.summary import markdown, rows
from scaler.sim.traffic import FAMILIES, generate, write_csv
from scaler.sim.workload import Workload, WorkloadError, from_trace
from scaler.snapshot import load_snapshot
from services.cli.common import tiers_option

scaler_app = typer.Typer(
    help="The scaler: run it, decide on a signals snapshot, write traffic traces.",
    no_args_is_help=True,
)


@scaler_app.callback()
def _scaler_group() -> None:
    """The scaler's commands (kept a group even while it has one command)."""


def _config(path: Path | None) -> PolicyConfig:
    return PolicyConfig() if path is None else load_config(path)


def _policy_names(value: str) -> str:
    if value not in POLICIES:
        raise typer.BadParameter(f"choose one of {sorted(POLICIES)}")
    return value


@scaler_app.command("decide")
def decide_command(
    signals: Annotated[Path, typer.Option("--signals", help="Snapshot JSON (see docs/scaler.md).")],
    config: Annotated[
        Path | None, typer.Option("--config", help="PolicyConfig JSON; defaults otherwise.")
    ] = None,
    policy: Annotated[
        str, typer.Option("--policy", help="slo | keda-lag | hpa-util", callback=_policy_names)
    ] = "slo",
    explain: Annotated[
        bool, typer.Option("--explain", help="Also print one readable line per group.")
    ] = False,
) -> None:
    """Run the policy once on a snapshot and print the decision as JSON Lines: one object per
    group, one line each."""
    try:
        snapshot = load_snapshot(signals)
        cfg = _config(config)
    except SignalsError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=2) from exc
    try:
        decision, _ = POLICIES[policy](snapshot.signals, snapshot.state, cfg, snapshot.now)
    except SignalsError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=2) from exc
    except Exception as exc:  # any other failure on a snapshot that loaded is a defect
        typer.echo(f"error: {policy_defect(policy, signals, exc)}", err=True)
        raise typer.Exit(code=2) from exc
    for group in decision.groups:
        # A number the policy's arithmetic took past a float (1e308 arrivals) is null, not
        # `Infinity`, which no JSON reader takes. One compact line per group (JSON Lines):
        # indented objects one after another were neither one JSON document nor lines.
        typer.echo(json.dumps(finite_or_null(group.to_dict()), allow_nan=False))
        if explain:
            typer.echo(group.line(), err=True)


def policy_defect(policy: str, signals: Path, exc: Exception) -> str:
    """What `decide` says when the policy fails on a snapshot the loader accepted."""
    return (
        f"the {policy} policy failed on {signals}: {type(exc).__name__}: {exc}. "
        "This is a defect in inferbus (a snapshot that loads must get a decision): "
        "please report it with the snapshot"
    )


@scaler_app.command("traffic")
def traffic_command(
    family: Annotated[str, typer.Argument(help=f"one of {', '.join(FAMILIES)}")],
    out: Annotated[Path, typer.Option("--out", help="CSV to write (the trace's form).")],
    seed: Annotated[int, typer.Option("--seed", min=0, help="Same seed, same requests.")] = 1,
) -> None:
    """Write one seeded instance of a traffic family as a trace CSV for `inferbus sim --trace`."""
    problem = output_problem(out)
    if problem is None and out.suffix.lower() in (".gz", ".bz2", ".xz", ".zip"):
        problem = "the trace is written as plain CSV, which `sim --trace` reads: name it .csv"
    if problem is not None:
        typer.echo(f"error: --out {out}: {problem}", err=True)
        raise typer.Exit(code=2)
    try:
        traffic = generate(family, seed)
    except WorkloadError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=2) from exc
    write_csv(traffic, out)
    n = traffic.times.size
    span = float(traffic.times[-1]) if n else 0.0
    rate = n / max(span, 1.0)
    typer.echo(f"{family} seed {seed}: {n} requests over {span:.0f} s ({rate:.2f}/s) -> {out}")


@scaler_app.command("table")
def table_command(
    reports: Annotated[
        list[Path], typer.Argument(help="`inferbus sim --json` reports (.json or .json.gz).")
    ],
) -> None:
    """Print one markdown table over sim reports: attainment, cost over the oracle, actions."""
    try:
        found = [row for path in reports for row in rows(path)]
    except WorkloadError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=2) from exc
    typer.echo(markdown(found))


def _workload(
    trace: Path | None,
    scenario_name: str | None,
    rate_scale: float | None,
    tiers: str | None,
    seed: int,
) -> Workload:
    if (trace is None) == (scenario_name is None):
        raise typer.BadParameter("give exactly one of --trace FILE or --scenario NAME")
    if trace is not None:
        return from_trace(
            trace,
            rate_scale=1.0 if rate_scale is None else rate_scale,
            tiers=tiers_option("interactive" if tiers is None else tiers, "--tiers"),
            max_input_tokens=512,
            seed=seed,
        )
    assert scenario_name is not None
    ignored = [
        flag for flag, v in (("--rate-scale", rate_scale), ("--tiers", tiers)) if v is not None
    ]
    if ignored:
        raise typer.BadParameter(
            f"{' and '.join(ignored)} apply to --trace; a scenario sets its own rates and tiers"
        )
    return scenario(scenario_name, seed)


def _output_problem(json_out: Path | None, plot_out: Path | None) -> str | None:
    """Why the report or the plot could not be written, found before an hour is simulated."""
    if json_out is not None and json_out.is_dir():
        return f"--json {json_out} is a folder; name a file (report.json or report.json.gz)"
    if json_out is not None and (why := output_problem(json_out)) is not None:
        return f"--json {json_out}: {why}"
    if plot_out is not None:
        from scaler.sim.plot import plot_path_problem

        why = plot_path_problem(plot_out)
        if why is not None:
            return f"--plot {plot_out}: {why}"
    return None


_FLAGS = {
    "collection_interval_s": "--interval-s",
    "partitions": "--partitions",
    "time_to_ready_s": "--time-to-ready-s",
    "handover_pause_s": "--handover-pause-s",
    "rebalance_pause_s": "--rebalance-pause-s",
    "min_replicas": "--min-replicas",
    "max_replicas": "--max-replicas",
    "initial_replicas": "--initial-replicas",
    "max_total_replicas": "--max-total-replicas",
    "pause_model": "--pause-model",
    "queues": "--queues",
    "slo_p99_e2e_ms": "--slo-ms",
    "scaler_restart_at_s": "--scaler-restart-at-s",
    "scaler_restart_gap_s": "--scaler-restart-gap-s",
}
"""The simulator's settings that `sim` takes as flags, for its error messages."""


def _print_error(console: Console, message: str) -> None:
    """`error: MESSAGE` in red, the message printed as written (a `[` in it is not markup)."""
    console.print(f"[red]error:[/red] {escape(message)}")


def _with_flags(message: str) -> str:
    """A simulator error with each setting's flag beside its name (`partitions (--partitions)`)."""
    for name, flag in _FLAGS.items():
        message = re.sub(rf"\b{name}\b", f"{name} ({flag})", message, count=1)
    return message


def _refuse_unused_pause(
    pause_model: str, rebalance_pause_s: float | None, handover_pause_s: float | None
) -> None:
    """Each pause flag applies to one pause model; given with the other it changed nothing."""
    flag, value, model = (
        ("--rebalance-pause-s", rebalance_pause_s, "eager")
        if pause_model == "incremental"
        else ("--handover-pause-s", handover_pause_s, "incremental")
    )
    if value is not None:
        raise typer.BadParameter(f"{flag} applies to --pause-model {model} only")


def _refuse_unused_recall(params: SimParams, *, gap_given: bool) -> None:
    """`--no-recall` and `--scaler-restart-gap-s` say how the scaler restarts; with no
    restart they changed nothing."""
    if params.scaler_restart_at_s is not None:
        return
    if not params.scaler_recall:
        raise typer.BadParameter("--no-recall applies with --scaler-restart-at-s only")
    if gap_given:
        raise typer.BadParameter("--scaler-restart-gap-s applies with --scaler-restart-at-s only")


def _phase_line(check: PhaseCheck) -> str:
    """One phase check as `sim` prints it."""
    breach = (
        "no e2e p99 breach"
        if check.first_breach_s is None
        else f"first e2e p99 breach at {check.first_breach_s} s"
    )
    return (
        f"  {check.tier} {check.phase}: first new replica ready at {check.first_ready_s} s, "
        f"{breach} -> {'ok' if check.ok else 'late'}"
    )


def sim_command(  # noqa: PLR0917 (typer maps each option to a parameter)
    policy: Annotated[
        str, typer.Option("--policy", help="slo | keda-lag | hpa-util | all")
    ] = "all",
    trace: Annotated[
        Path | None, typer.Option("--trace", help="CSV: TIMESTAMP,ContextTokens,GeneratedTokens")
    ] = None,
    scenario_name: Annotated[
        str | None, typer.Option("--scenario", help=f"one of {', '.join(SCENARIOS)}")
    ] = None,
    rate_scale: Annotated[
        float | None, typer.Option("--rate-scale", help="Trace rate multiplier. [default: 1.0]")
    ] = None,
    tiers: Annotated[
        str | None,
        typer.Option(
            "--tiers",
            help="Trace requests spread over these tiers (comma list). [default: interactive]",
        ),
    ] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the report here.")] = None,
    plot_out: Annotated[Path | None, typer.Option("--plot", help="Write a PNG here.")] = None,
    seed: Annotated[int, typer.Option("--seed", min=0)] = 1,
    model_yaml: Annotated[
        Path | None, typer.Option("--model-yaml", help="Take engine.sim and batching from here.")
    ] = None,
    a_ms: Annotated[float | None, typer.Option("--a-ms", help="Batch overhead ms.")] = None,
    b_ms: Annotated[float | None, typer.Option("--b-ms", help="ms per unit.")] = None,
    per: Annotated[str | None, typer.Option("--per", help="token | sample")] = None,
    time_to_ready_s: Annotated[float | None, typer.Option("--time-to-ready-s")] = None,
    pause_model: Annotated[
        str | None,
        typer.Option(
            "--pause-model",
            help="incremental (only moved partitions pause; default) | eager (whole group)",
        ),
    ] = None,
    handover_pause_s: Annotated[
        float | None,
        typer.Option("--handover-pause-s", help="incremental: pause of a moved partition."),
    ] = None,
    rebalance_pause_s: Annotated[
        float | None, typer.Option("--rebalance-pause-s", help="eager: pause of the group.")
    ] = None,
    standby: Annotated[
        bool, typer.Option("--standby/--no-standby", help="The actuator keeps warm standby.")
    ] = True,
    partitions: Annotated[int | None, typer.Option("--partitions")] = None,
    queues: Annotated[
        str | None,
        typer.Option(
            "--queues",
            help="partition (each consumer serves its own partitions, as live; default)"
            " | shared (one pooled FIFO)",
        ),
    ] = None,
    max_total_replicas: Annotated[int | None, typer.Option("--max-total-replicas")] = None,
    slo_ms: Annotated[
        float | None, typer.Option("--slo-ms", help="p99 e2e SLO of the traced tiers, ms.")
    ] = None,
    interval_s: Annotated[
        float | None, typer.Option("--interval-s", help="Seconds between policy ticks.")
    ] = None,
    min_replicas: Annotated[int | None, typer.Option("--min-replicas")] = None,
    max_replicas: Annotated[int | None, typer.Option("--max-replicas")] = None,
    initial_replicas: Annotated[
        int | None,
        typer.Option("--initial-replicas", help="Replicas at t=0 (default: the oracle's start)."),
    ] = None,
    config: Annotated[Path | None, typer.Option("--config", help="PolicyConfig JSON.")] = None,
    scaler_restart_at_s: Annotated[
        float | None,
        typer.Option(
            "--scaler-restart-at-s", help="The scaler restarts at this second of the trace."
        ),
    ] = None,
    scaler_restart_gap_s: Annotated[
        float | None,
        typer.Option(
            "--scaler-restart-gap-s",
            help="No scaler runs for this long from the restart (the new process starting).",
        ),
    ] = None,
    recall: Annotated[
        bool,
        typer.Option(
            "--recall/--no-recall",
            help="A restarted scaler replays its last 45 minutes of decisions (as live).",
        ),
    ] = True,
) -> None:
    """Simulate policies on a trace or a named scenario and compare them with the oracle."""
    names = sorted(POLICIES) if policy == "all" else [policy]
    if any(n not in POLICIES for n in names):
        raise typer.BadParameter(f"--policy: choose one of {sorted(POLICIES)} or all")
    if per not in (None, "token", "sample"):
        raise typer.BadParameter("--per must be token or sample")
    console = Console(stderr=True)
    problem = _output_problem(json_out, plot_out)
    if problem is not None:
        _print_error(console, problem)
        raise typer.Exit(code=2)
    try:
        cfg = _config(config)
        workload = _workload(trace, scenario_name, rate_scale, tiers, seed)
        service = read_service_model(model_yaml) if model_yaml else ServiceModel()
        service = ServiceModel(
            a_ms=service.a_ms if a_ms is None else a_ms,
            b_ms=service.b_ms if b_ms is None else b_ms,
            per=service.per if per is None else per,  # type: ignore[arg-type]
            max_batch_size=service.max_batch_size,
            max_queue_delay_ms=service.max_queue_delay_ms,
        )
        params = SimParams(service=service).with_overrides(workload.overrides)
    except (SignalsError, WorkloadError) as exc:
        _print_error(console, str(exc))
        raise typer.Exit(code=2) from exc
    try:
        given: dict[str, float | str | bool | None] = {
            "time_to_ready_s": time_to_ready_s,
            "pause_model": pause_model,
            "handover_pause_s": handover_pause_s,
            "standby": standby,
            "rebalance_pause_s": rebalance_pause_s,
            "partitions": partitions,
            "queues": queues,
            "max_total_replicas": max_total_replicas,
            "collection_interval_s": interval_s,
            "min_replicas": min_replicas,
            "warm_replicas": min_replicas,
            "max_replicas": max_replicas,
            "initial_replicas": initial_replicas,
            "scaler_restart_at_s": scaler_restart_at_s,
            "scaler_restart_gap_s": scaler_restart_gap_s,
            "scaler_recall": recall,
        }
        params = params.with_overrides({k: v for k, v in given.items() if v is not None})
        _refuse_unused_pause(params.pause_model, rebalance_pause_s, handover_pause_s)
        _refuse_unused_recall(params, gap_given=scaler_restart_gap_s is not None)
        if slo_ms is not None:
            traced = {tier: slo_ms for tier in workload.tiers}
            params = dataclasses.replace(params, slo_p99_e2e_ms={**params.slo_p99_e2e_ms, **traced})
        params.check_span(workload.duration_s)
    except WorkloadError as exc:  # the settings' own words: each with its flag
        _print_error(console, _with_flags(str(exc)))
        raise typer.Exit(code=2) from exc
    console.print(
        f"{workload.source}: {workload.total()} requests over {workload.duration_s:.0f} s"
    )
    with Progress(console=console, transient=True) as bar:
        task = bar.add_task("simulating", total=len(names))
        done = [0]

        def progress(t: float, end: float) -> None:
            bar.update(task, completed=done[0] + min(1.0, t / end))
            if t + params.collection_interval_s > end:
                done[0] += 1

        result = compare(workload, params, names, cfg, progress)
    typer.echo(table(result))
    for run in result.runs:
        console.print(f"{run.policy}: simulated in {run.wall_s:.1f} s")
        for check in result.phase_checks.get(run.policy, ()):
            console.print(_phase_line(check))
    if json_out is not None:
        write_json(result, json_out)
    if plot_out is not None:
        from scaler.sim.plot import plot

        plot(result, plot_out)
        console.print(f"plot written to {plot_out}")


def main() -> None:
    """Standalone entry mirroring the main CLI: `python -m scaler.cli scaler decide|sim ...`."""
    app = typer.Typer(no_args_is_help=True)
    app.add_typer(scaler_app, name="scaler")
    app.command("sim")(sim_command)
    app()


if __name__ == "__main__":
    main()

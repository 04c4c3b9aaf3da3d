"""`inferbus models ...`: write the demo models, list, calibrate the sim, add MiniLM or your
own ONNX file, and decide a canary rollout by hand (promote, rollback, share)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from schemas.errors import InferbusError
from services.cli.common import BootstrapOption

if TYPE_CHECKING:
    from infra.models.repository import ModelRepository
    from services.models.rollout import Action

models_app = typer.Typer(
    help="The model repository: demo models, listing, calibration, canary rollouts."
)
add_app = typer.Typer(help="Add a real model to the repository.")
models_app.add_typer(add_app, name="add")

console = Console()
DirOption = Annotated[
    Path,
    typer.Option(
        "--models",
        "--dir",
        envvar="INFERBUS_MODELS_DIR",
        help="Model repository folder, as for up, ingest and worker (--dir: the older name).",
    ),
]


ReasonOption = Annotated[
    str | None, typer.Option("--reason", help="Why, for the record (default: what was done).")
]


def _fail(exc: InferbusError) -> typer.Exit:
    """An expected failure as every command says one: one `error:` line on stderr, exit 1."""
    typer.echo(f"error: {' '.join(str(exc).split())}", err=True)
    return typer.Exit(code=1)


@models_app.command("init")
def init(
    directory: DirOption = Path("models"),
    seed: Annotated[int, typer.Option(help="Seed of the demo weights.")] = 0,
    force: Annotated[bool, typer.Option("--force", help="Overwrite existing demo models.")] = False,
) -> None:
    """Write demo-mlp and demo-encoder (deterministic from the seed)."""
    from services.models.demo import write_demo_models

    with console.status("writing demo models"):
        written = write_demo_models(directory, seed=seed, overwrite=force)
    if not written:
        console.print(f"demo models already in {directory} (use --force to rewrite)")
        return
    for path in written:
        console.print(f"wrote {path} ({path.stat().st_size:,} bytes)")
    for name in _kept(directory, written):
        console.print(f"kept {directory / name}: it has a model.yaml (use --force to rewrite)")


def _kept(directory: Path, written: list[Path]) -> list[str]:
    """The demo models `init` left as they were: one written beside another one kept was
    said as if both were new (and a broken model.yaml went unmentioned)."""
    from services.models.demo import DEMO_MODELS

    touched = {path.relative_to(directory).parts[0] for path in written}
    return [name for name in DEMO_MODELS if name not in touched]


@models_app.command("list")
def list_models(directory: DirOption = Path("models")) -> None:
    """Models, versions, engine and inputs."""
    from infra.models.repository import ModelRepository

    if not directory.is_dir():
        typer.echo(
            f"error: no model repository at {directory} (`inferbus models init --models "
            f"{directory}` makes one)",
            err=True,
        )
        raise typer.Exit(code=1)
    repo = ModelRepository(directory)
    table = Table()
    # Nothing is cut with "…": a narrow terminal folds long cells; inputs, outputs and
    # providers take a line each.
    for column in ("model", "versions", "rollout", "engine", "inputs", "outputs", "text"):
        table.add_column(column, overflow="fold")
    for name in repo.names():
        try:
            config = repo.config(name)
        except InferbusError as exc:
            table.add_row(name, "-", "-", "[red]invalid[/red]", escape(str(exc)), "", "")
            continue
        engine: str = config.engine.kind
        if engine == "onnxruntime":
            engine += "\n(" + ">".join(config.engine.providers) + ")"
        rollout = config.rollout
        plan = "-"
        if rollout is not None:
            plan = f"stable {rollout.stable}"
            if rollout.canary is not None:
                plan += f", canary {rollout.canary} at {rollout.share:.0%}"
        table.add_row(
            name,
            ", ".join(repo.versions(name)) or "[yellow]none complete[/yellow]",
            plan,
            engine,
            escape("\n".join(f"{s.name}:{s.dtype}{s.shape}" for s in config.inputs)),
            escape("\n".join(f"{s.name}:{s.dtype}{s.shape}" for s in config.outputs)),
            "yes" if config.tokenizer else "no",
        )
    if not repo.names():
        console.print(f"no models in {directory}; run `inferbus models init`")
        return
    # Piped, rich would assume 80 columns: a file or a grep gets the table at full width.
    if console.is_terminal:
        console.print(table)
    else:
        Console(width=Console(width=1_000).measure(table).maximum).print(table)


@models_app.command("calibrate")
def calibrate(
    model: Annotated[str, typer.Argument(help="Model name in the repository.")],
    directory: DirOption = Path("models"),
    repeats: Annotated[int, typer.Option(min=1, help="Timed runs per shape.")] = 5,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Measure, do not write.")] = False,
) -> None:
    """Measure the real engine on this machine; write a and b to engine.sim in model.yaml."""
    from services.models.calibrate import Point, calibrate_model, default_grid

    try:
        _, grid = default_grid(_repository(directory).config(model))
    except InferbusError as exc:
        raise _fail(exc) from exc
    progress = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=console,
    )
    task = progress.add_task(f"measuring {model}", total=len(grid))

    def advance(point: Point) -> None:
        shape = f"batch {point.batch}" + (f" x {point.seq}" if point.seq else "")
        progress.console.print(f"  {shape:>18}: {point.ms:8.2f} ms")
        progress.advance(task)

    try:
        with progress:  # stopped before an error is said: its last frame came after it
            fit = calibrate_model(
                directory, model, repeats=repeats, on_point=advance, write=not dry_run
            )
    except InferbusError as exc:
        raise _fail(exc) from exc
    console.print(
        f"{model}: time = {fit.a_ms:.3f} ms + {fit.b_ms:.5f} ms/{fit.per}  (r² {fit.r2:.3f})"
    )
    if not dry_run:
        console.print(f"wrote engine.sim to {directory / model / 'model.yaml'}")


@add_app.command("minilm")
def add_minilm(
    directory: DirOption = Path("models"),
    force: Annotated[
        bool,
        typer.Option("--force", help="Add a new version to an existing minilm (hot-reloaded)."),
    ] = False,
) -> None:
    """Export all-MiniLM-L6-v2 to ONNX and check it against PyTorch (needs the minilm extra)."""
    from infra.models.repository import ModelRepository
    from services.models import minilm

    try:
        with console.status("loading the minilm extra") as status:
            worst = minilm.add_minilm(directory, overwrite=force, on_step=status.update)
    except InferbusError as exc:
        raise _fail(exc) from exc
    version = ModelRepository(directory).resolve(minilm.NAME)
    console.print(
        f"added {version.directory}: max |ONNX - PyTorch| = {worst:.2e} "
        f"(tolerance {minilm.TOLERANCE:g})"
    )


def _repository(directory: Path) -> ModelRepository:
    """The repository at --dir; a folder that is not there is named (not "model 'x' is not
    in the repository")."""
    from infra.models.repository import ModelRepository

    if not directory.is_dir():
        raise FileNotFoundError(2, "no model repository (--models)", str(directory))
    return ModelRepository(directory)


def _decide(
    model: str,
    directory: Path,
    bootstrap: str,
    action: Action,
    *,
    share: float | None = None,
    reason: str | None = None,
    force: bool = False,
) -> None:
    """Publish a decision by hand, checked against the one in force (`against_current`);
    errors end the command with one line (the root group)."""
    from datetime import UTC, datetime

    from services.cli.common import run, setup_logging
    from services.models.rollout import (
        against_current,
        current_decision,
        manual_record,
        operator,
        publish_manual,
        workers_ready,
    )

    setup_logging("WARNING", kafka_level="CRITICAL")
    config = _repository(directory).config(model)
    record = manual_record(
        config,
        action,
        at=datetime.now(UTC),
        by=operator(),
        share=share,
        reason=reason,
    )

    async def checked_then_published() -> str | None:
        ready = (
            record.canary in (await workers_ready(bootstrap, model))["canary"]
            if action == "promote"
            else None
        )
        current = await current_decision(bootstrap, model)
        note = against_current(record, current, canary_ready=ready, force=force)
        await publish_manual(bootstrap, record)
        return note

    note = run(checked_then_published())
    console.print(f"published to inferbus.rollouts: {escape(record.line())}")
    if note is not None:
        console.print(f"note: {escape(note)}")


@models_app.command("status")
def rollout_status(
    model: Annotated[str, typer.Argument(help="Model whose rollout to show.")],
    directory: DirOption = Path("models"),
    bootstrap: BootstrapOption = "127.0.0.1:9092",
) -> None:
    """The rollout plan (model.yaml), the decision on inferbus.rollouts and what is in force."""
    from services.cli.common import run, setup_logging
    from services.models.rollout import current_decision, status_lines, workers_ready

    setup_logging("WARNING", kafka_level="CRITICAL")
    config = _repository(directory).config(model)

    async def read() -> list[str]:
        decision = await current_decision(bootstrap, model) if config.rollout else None
        return status_lines(config, decision, await workers_ready(bootstrap, model))

    for line in run(read()):
        console.print(escape(line))


@models_app.command("promote")
def promote(
    model: Annotated[str, typer.Argument(help="Model whose canary becomes stable.")],
    directory: DirOption = Path("models"),
    bootstrap: BootstrapOption = "127.0.0.1:9092",
    reason: ReasonOption = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force", help="Promote a canary no worker serves, or one the verdict rolled back."
        ),
    ] = False,
) -> None:
    """The canary becomes stable: stable workers switch to its version; the canary lane empties."""
    _decide(model, directory, bootstrap, "promote", reason=reason, force=force)


@models_app.command("rollback")
def rollback(
    model: Annotated[str, typer.Argument(help="Model whose canary stops taking requests.")],
    directory: DirOption = Path("models"),
    bootstrap: BootstrapOption = "127.0.0.1:9092",
    reason: ReasonOption = None,
) -> None:
    """The canary's share drops to 0 (after a promote: stable workers switch back)."""
    _decide(model, directory, bootstrap, "rollback", reason=reason)


@models_app.command("share", context_settings={"ignore_unknown_options": True})
def set_share(
    model: Annotated[str, typer.Argument(help="Model with a canary.")],
    share: Annotated[float, typer.Argument(help="The canary's share of requests, 0..1.")],
    directory: DirOption = Path("models"),
    bootstrap: BootstrapOption = "127.0.0.1:9092",
    reason: ReasonOption = None,
) -> None:
    """Set the canary's share at runtime, over model.yaml's (ramp up, or resume after
    a rollback)."""
    _decide(model, directory, bootstrap, "share", share=share, reason=reason)


@add_app.command("onnx")
def add_onnx(
    source: Annotated[Path, typer.Argument(help="The ONNX file (external weights beside it).")],
    name: Annotated[str, typer.Option("--name", help="Model name in the repository.")],
    directory: DirOption = Path("models"),
    force: Annotated[
        bool,
        typer.Option("--force", help="Add a new version to an existing model (hot-reloaded)."),
    ] = False,
    max_batch_size: Annotated[
        int, typer.Option("--max-batch-size", min=1, help="batching.max_batch_size of a new model.")
    ] = 32,
) -> None:
    """Add your own ONNX model: model.yaml read off the graph, checked in the worker's engine."""
    from services.models.own import add_onnx as add

    try:
        with console.status(f"checking {source}"):
            added = add(directory, source, name, new_version=force, max_batch_size=max_batch_size)
    except InferbusError as exc:
        raise _fail(exc) from exc
    config = added.version.config
    console.print(f"added {added.version.directory}")
    for spec in config.inputs:
        console.print(escape(f"  input  {spec.name}: {spec.dtype}{spec.shape}"))
    for spec in config.outputs:
        console.print(escape(f"  output {spec.name}: {spec.dtype}{spec.shape}"))
    for note in added.notes:
        console.print(f"note: {escape(note)}")

"""`inferbus`: run the stack, single services, requests, benchmarks, the scaler and traces."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import IO, TYPE_CHECKING, Annotated

import typer

from infra import eventloop
from infra.files import AlreadyRunning, hold_lock
from infra.gc_tuning import tune_for_service
from services.cli.common import (
    BootstrapOption,
    OneLineErrors,
    bootstrap_option,
    broken_pipes_exit_141,
    check_range,
    load_settings,
    run,
    run_service,
    setup_logging,
    tiers_option,
)

if TYPE_CHECKING:
    from services.ingest.settings import IngestSettings
    from services.worker.settings import WorkerSettings

app = typer.Typer(
    cls=OneLineErrors,
    name="inferbus",
    help="Event-driven model serving on Kafka.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)
topics_app = typer.Typer(help="Provision Kafka topics.", no_args_is_help=True)
app.add_typer(topics_app, name="topics")


Port = Annotated[
    int | None,
    typer.Option(
        min=0,
        max=65535,
        help="Embedded broker's preferred port (else INFERBUS_BROKER_PORT, 9092; 0: any); a "
        "free one if taken.",
    ),
]
ModelsDir = Annotated[
    Path, typer.Option("--models", envvar="INFERBUS_MODELS_DIR", help="Model repository folder.")
]
LogLevel = Annotated[str, typer.Option("--log-level", help="DEBUG, INFO, WARNING.")]


def _duration(value: float | None) -> float | None:
    """Seconds to run: a finite number > 0 (nan and 0 ran forever, a negative number
    stopped the stack as soon as it had started)."""
    if value is not None:
        check_range(value, "--duration", low=0, above=True)
    return value


@app.command()
def broker(port: Port = None, log_level: LogLevel = "INFO") -> None:
    """Run the embedded Tansu broker in the foreground until Ctrl-C."""
    import signal
    import threading

    from infra.broker import EmbeddedBroker
    from infra.settings import BrokerSettings

    setup_logging(log_level)
    settings = load_settings(BrokerSettings)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with EmbeddedBroker(settings, port=port) as embedded:
        typer.echo(f"broker ready: --bootstrap {embedded.bootstrap}")
        try:
            while not stop.wait(0.5):
                if not embedded.running:
                    raise typer.Exit(1)
        except KeyboardInterrupt:
            pass


@topics_app.command("create")
def topics_create(
    bootstrap: BootstrapOption = "127.0.0.1:9092",
    models: ModelsDir = Path("models"),
    partitions: Annotated[int, typer.Option(help="Partitions of each tier topic.")] = 12,
    reply_topics: Annotated[
        list[str] | None,
        typer.Option(
            "--reply-topic",
            help="Also a reply topic of your own (repeatable), e.g. inferbus.results.team-a.",
        ),
    ] = None,
) -> None:
    """Create every inferbus topic for the models in the repository (idempotent)."""
    from infra.models.repository import ModelRepository
    from infra.topics import TopicSpec, ensure_topics, repository_topics
    from schemas.topics import RESULTS, is_reply_topic

    setup_logging("WARNING")
    require_repository(models)  # else only the shared topics were made, and it said success
    specs = repository_topics(ModelRepository(models), tier_partitions=partitions)
    for topic in reply_topics or ():
        if not is_reply_topic(topic):
            raise typer.BadParameter(
                f"{topic!r} is not a topic results may go to ({RESULTS}.<name>, or a legal "
                "topic outside inferbus.*)",
                param_hint="--reply-topic",
            )
        shared = next(spec for spec in specs if spec.name == RESULTS)
        specs.append(TopicSpec(topic, shared.partitions))
    created = run(ensure_topics(bootstrap, specs))
    typer.echo(f"created {len(created)} topic(s): {', '.join(created) or 'none, all existed'}")


ServiceModels = Annotated[
    Path | None,
    typer.Option(
        "--models",
        help="Model repository folder (else the service's *_MODELS_DIR, then INFERBUS_MODELS_DIR, "
        "then models).",
    ),
]


def require_repository(models: Path) -> None:
    """A repository folder that is not there is refused before anything connects: a typo in
    --models ran ingest answering every request `model_not_found`, and said nothing."""
    if not models.is_dir():
        raise FileNotFoundError(
            2, "no model repository (`inferbus models init` makes one; or --models DIR)", models
        )


def given(**flags: object) -> dict[str, object]:
    """The flags the user set: unset ones leave the service's settings to its environment."""
    return {name: value for name, value in flags.items() if value is not None}


def ingest_settings(models: Path | None) -> IngestSettings:
    """IngestSettings from INFERBUS_INGEST_* with the given flags on top."""
    from services.ingest.settings import IngestSettings

    return load_settings(IngestSettings, given(models_dir=models), {"models_dir": "--models"})


def worker_settings(
    model: str | None,
    tier: str | None,
    models: Path | None,
    version: str | None,
    lane: str | None = None,
) -> WorkerSettings:
    """WorkerSettings from INFERBUS_WORKER_* with the given flags on top."""
    from services.worker.settings import WorkerSettings

    flags = given(
        model=model,
        tiers=tiers_option(tier, "--tier") if tier is not None else None,
        models_dir=models,
        model_version=version,
        lane=lane,
    )
    names = {"tiers": "--tier", "models_dir": "--models", "model_version": "--version"}
    return load_settings(WorkerSettings, flags, names)


@app.command()
def ingest(
    bootstrap: BootstrapOption = "127.0.0.1:9092",
    models: ServiceModels = None,
    log_level: LogLevel = "INFO",
) -> None:
    """Run the ingest service (validate and route the ingest topics)."""
    from services.ingest.app import run_ingest

    setup_logging(log_level)
    settings = ingest_settings(models)
    require_repository(settings.models_dir)
    run_service(run_ingest(bootstrap, settings))


@app.command()
def worker(
    model: Annotated[
        str | None, typer.Option("--model", "-m", help="Model to serve (INFERBUS_WORKER_MODEL).")
    ] = None,
    tier: Annotated[
        str | None,
        typer.Option(
            "--tier",
            "-t",
            help="Tier(s), comma-separated, priority order (or INFERBUS_WORKER_TIERS as a JSON "
            'list: \'["critical", "interactive"]\'; default interactive).',
        ),
    ] = None,
    bootstrap: BootstrapOption = "127.0.0.1:9092",
    models: ServiceModels = None,
    version: Annotated[
        str | None, typer.Option(help="Pin a model version (INFERBUS_WORKER_MODEL_VERSION).")
    ] = None,
    lane: Annotated[
        str | None,
        typer.Option(
            help="Rollout lane: stable or canary (INFERBUS_WORKER_LANE; stable). A canary "
            "worker serves model.yaml's rollout.canary from the canary topics."
        ),
    ] = None,
    log_level: LogLevel = "INFO",
) -> None:
    """Run one worker: one engine session, one consumer per tier."""
    from services.worker.app import run_worker

    setup_logging(log_level)
    settings = worker_settings(model, tier, models, version, lane)
    require_repository(settings.models_dir)
    run_service(run_worker(bootstrap, settings))


@app.command()
def infer(
    model: Annotated[str, typer.Argument(help="Model name.")],
    json_inputs: Annotated[
        str,
        typer.Option(
            "--json",
            help='Inputs as JSON: {"x": [[...]]} (nested lists, dtype from the model) '
            'or wire-format tensors, or {"text": "..."}; @FILE reads it from a file, - '
            "from standard input.",
        ),
    ],
    tier: Annotated[str, typer.Option(help="critical, interactive or batch.")] = "interactive",
    timeout: Annotated[
        float, typer.Option(help="Seconds to wait for the result.", min=0.001)
    ] = 30.0,
    bootstrap: BootstrapOption = "127.0.0.1:9092",
    models: ModelsDir = Path("models"),
) -> None:
    """Send one request and print its result JSON (exit 1 unless status is ok)."""
    from services.cli.infer import infer_once, printable, read_inputs

    tiers = tiers_option(tier, "--tier")
    if len(tiers) != 1:
        raise typer.BadParameter(f"--tier takes one tier; got {tier!r}")
    setup_logging("WARNING", kafka_level="CRITICAL")
    try:
        payload = json.loads(read_inputs(json_inputs, sys.stdin))
    except json.JSONDecodeError as exc:
        raise typer.BadParameter(f"--json is not valid JSON: {exc}") from exc
    except RecursionError:
        raise typer.BadParameter("--json is not valid JSON: nested deeper than it reads") from None
    result = run(infer_once(bootstrap, models, model, payload, tier=tiers[0], timeout_s=timeout))
    typer.echo(printable(result).model_dump_json(indent=2, exclude_none=True))
    raise typer.Exit(0 if result.ok else 1)


@app.command()
def up(
    bootstrap: Annotated[
        str | None,
        typer.Option(
            "--bootstrap",
            "-b",
            help="Use this Kafka instead of the embedded broker.",
            callback=bootstrap_option,
        ),
    ] = None,
    models: ModelsDir = Path("models"),
    workers: Annotated[int, typer.Option(min=1, help="Workers to start per model and tier.")] = 1,
    ingest: Annotated[int, typer.Option(min=1, help="Ingest instances (one consumer group).")] = 1,
    headless: Annotated[bool, typer.Option(help="Status lines instead of the live view.")] = False,
    duration: Annotated[
        float | None, typer.Option(help="Stop after this many seconds.", callback=_duration)
    ] = None,
    scaler: Annotated[bool, typer.Option(help="Run the scaler with the local actuator.")] = True,
    tiers: Annotated[
        str | None,
        typer.Option(
            help="Only these tiers (comma-separated): workers for them alone, and ingest "
            "answers a request for another tier invalid_input."
        ),
    ] = None,
    port: Port = None,
    log_dir: Annotated[Path, typer.Option(help="Where child processes write their logs.")] = Path(
        ".inferbus/logs"
    ),
) -> None:
    """Run everything on this machine: broker, topics, ingest, scaler and workers."""
    from infra.settings import BrokerSettings
    from scaler.config import PolicyConfig
    from scaler.settings import ScalerSettings
    from services.cli.stack import Stack, StackOptions

    setup_logging("WARNING")
    # The children read their settings from this environment: a bad one is refused here,
    # named, before anything starts (not left to a child's restart loop and its log).
    ingest_settings(models)
    worker_settings(None, None, models, None)
    scaler_settings = load_settings(ScalerSettings)
    if bootstrap is None:
        load_settings(BrokerSettings)
    _check_repository(models)
    options = StackOptions(
        bootstrap=bootstrap,
        models_dir=models,
        workers_per_group=workers,
        headless=headless or not sys.stdout.isatty(),
        duration_s=duration,
        with_scaler=scaler,
        tiers=tiers_option(tiers, "--tiers") if tiers is not None else None,
        broker_port=port,
        log_dir=log_dir,
        ingest_instances=ingest,
        policy=scaler_settings.policy,
        policy_config=PolicyConfig(scale_down_window_s=scaler_settings.scale_down_window_s),
        worker_budget=scaler_settings.max_total_replicas,
        idle_hold_every_s=scaler_settings.idle_hold_every_s,
        recall_timeout_s=scaler_settings.recall_timeout_s,
        scaler_metrics_port=scaler_settings.metrics_port,
    )
    lock = _one_stack_per_log_dir(log_dir)
    tune_for_service()
    try:
        eventloop.run(Stack(options).run())
    except KeyboardInterrupt:
        typer.echo("stopped")
    finally:
        lock.close()


def _check_repository(models: Path) -> None:
    """Every model.yaml read before anything starts: a bad one is refused, named, instead of
    after the broker and topics came up (a missing folder gets the demo models)."""
    from infra.models.repository import ModelRepository

    if models.exists() and not models.is_dir():  # else the broker started, then this failed
        raise typer.BadParameter(f"{models} is not a folder", param_hint="'--models'")
    if models.is_dir():
        repository = ModelRepository(models)
        for name in repository.names():
            repository.config(name)


def _one_stack_per_log_dir(log_dir: Path) -> IO[str]:
    """A second `inferbus up` beside a running one started a whole second stack on another
    port, its ingest writing into the same log files: refused, saying where the first runs."""
    try:
        return hold_lock(log_dir / "up.lock")
    except (FileExistsError, NotADirectoryError, PermissionError) as exc:
        raise typer.BadParameter(
            f"{log_dir} cannot hold the logs: {exc.strerror or exc}", param_hint="'--log-dir'"
        ) from None
    except AlreadyRunning as exc:
        pid = exc.pid if exc.pid is not None else "?"
        raise AlreadyRunning(
            f"inferbus up already runs here (pid {pid}, logs in {log_dir}): stop it first "
            f"(Ctrl-C in its terminal, or kill -INT {pid}), or run this one with another "
            "--log-dir (and its own --port)",
            pid=exc.pid,
        ) from None


def scaler_run(
    bootstrap: BootstrapOption = "127.0.0.1:9092",
    models: ModelsDir = Path("models"),
    actuator: Annotated[
        str | None,
        typer.Option(help="local, kubernetes, compose or auto (env INFERBUS_SCALER_ACTUATOR)."),
    ] = None,
    policy: Annotated[str | None, typer.Option(help="slo, keda-lag or hpa-util.")] = None,
    dry_run: Annotated[bool, typer.Option(help="Decide and publish, never scale.")] = False,
    log_level: LogLevel = "INFO",
) -> None:
    """Run the scaler: collect lag and traced latency, decide, scale the worker groups."""
    from scaler.run import run_scaler
    from scaler.settings import ScalerSettings

    setup_logging(log_level)
    overrides: dict[str, object] = {"dry_run": dry_run} if dry_run else {}
    if actuator is not None:
        overrides["actuator"] = actuator
    if policy is not None:
        overrides["policy"] = policy
    settings = load_settings(ScalerSettings, overrides)
    # The local actuator's workers read this environment: wait out their stop, as they see it.
    grace_s = worker_settings(None, None, models, None).stop_grace_s
    run_service(run_scaler(bootstrap, models, settings, worker_grace_s=grace_s))


def _mount_subcommands() -> None:
    from scaler.cli import scaler_app, sim_command
    from services.chaos.cli import chaos_command
    from services.cli.bench import bench_app
    from services.cli.load import load_command
    from services.models.cli import models_app
    from tracing.cli import trace_command, traces_command

    app.add_typer(models_app, name="models")
    app.add_typer(bench_app, name="bench")
    scaler_app.command("run")(scaler_run)
    app.add_typer(scaler_app, name="scaler")
    app.command("sim")(sim_command)
    app.command("load")(load_command)
    app.command("trace")(trace_command)
    app.command("traces")(traces_command)
    app.command("chaos")(chaos_command)


_mount_subcommands()


def main() -> None:
    """Console entry point."""
    broken_pipes_exit_141()
    app()


if __name__ == "__main__":
    main()

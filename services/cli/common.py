"""Shared CLI plumbing: logging set-up, running coroutines, settings, and one-line errors."""

from __future__ import annotations

import logging
import math
import os
import re
import sys
from collections.abc import Coroutine, Mapping
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from aiokafka.errors import KafkaConnectionError, KafkaError
from pydantic import ValidationError
from pydantic_settings import BaseSettings, SettingsError
from rich.console import Console
from typer.core import TyperGroup

from infra import eventloop
from infra.files import output_problem
from infra.gc_tuning import tune_for_service
from infra.lograte import limit_log_rate
from schemas.errors import InferbusError, describe_validation_error
from schemas.topics import Tier, parse_tiers

T = TypeVar("T")
_ADDRESS = re.compile(r"\('([^']+)', (\d+)")
"""aiokafka's "Unable to bootstrap from [('127.0.0.1', 9092, ...)]" addresses."""
S = TypeVar("S", bound=BaseSettings)


class SettingsInvalid(InferbusError):
    """A service's settings (flags or `INFERBUS_*` environment) are refused at start."""


def check_range(
    value: float, flag: str, *, low: float, high: float = math.inf, above: bool = False
) -> None:
    """Refuse a number outside [low, high] (or (low, high] when `above`), NaN and infinity
    included: they would end a long run in a traceback, or never end it."""
    inside = math.isfinite(value) and (value > low if above else value >= low) and value <= high
    if not inside:
        bound = f"> {low:g}" if above else f">= {low:g}"
        upto = f" and <= {high:g}" if math.isfinite(high) else ""
        raise typer.BadParameter(f"{flag} must be a finite number {bound}{upto}, got {value}")


def check_output(path: Path | None, flag: str) -> None:
    """A usage error (exit 2) naming `flag`, before a long run, when its report could not be
    written at `path`; else its folder is made."""
    if path is None:
        return
    problem = output_problem(path)
    if problem is None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            problem = f"cannot make its folder ({exc.strerror or exc})"
    if problem is not None:
        raise typer.BadParameter(f"{path} {problem}", param_hint=f"'{flag}'")


def tiers_option(value: str, flag: str) -> list[Tier]:
    """`flag`'s comma list of distinct tiers (`schemas.topics.parse_tiers`): a usage error
    naming the flag."""
    try:
        return parse_tiers(value)
    except ValueError as exc:
        raise typer.BadParameter(f"{flag} {exc}") from exc


def bootstrap_option(value: str | None) -> str | None:
    """`--bootstrap`'s check (a typer callback): a usage error naming the entry, not a
    traceback from inside the Kafka client."""
    from infra.kafka import check_bootstrap  # the Kafka client's imports, only when asked

    if value is not None:
        try:
            check_bootstrap(value)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
    return value


def setup_logging(level: str = "INFO", *, kafka_level: str = "WARNING") -> None:
    """key=value logs on stderr; chatty libraries stay at `kafka_level`; a line that
    repeats is written at most 10 times in 10 s (then counted, see `infra.lograte`).

    Commands that end with one error line of their own (infer, load) pass CRITICAL: aiokafka
    logs every failed connection attempt at ERROR, which that line already says."""
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    for noisy in ("aiokafka", "faststream", "kafka"):
        logging.getLogger(noisy).setLevel(kafka_level.upper())
    limit_log_rate()


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion; Ctrl-C ends it quietly (exit 130)."""
    try:
        return eventloop.run(coro)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


def run_service(coro: Coroutine[Any, Any, T]) -> T:
    """`run` for a long-running service: garbage collection tuned first
    (`infra.gc_tuning`)."""
    tune_for_service()
    return run(coro)


def load_settings(
    cls: type[S],
    flags: Mapping[str, Any] | None = None,
    flag_names: Mapping[str, str] | None = None,
) -> S:
    """`cls(**flags)` over its environment; a refusal names where the value came from: the
    flag for a field given as one (`flag_names[field]`, else `--field-name`), else the
    variable (`INFERBUS_..._X`)."""
    prefix = str(cls.model_config.get("env_prefix", ""))
    given = dict(flags or {})

    def source(field: str) -> str:
        if field in given:
            return (flag_names or {}).get(field, "--" + field.replace("_", "-"))
        return f"{prefix}{field.upper()}"

    try:
        return cls(**given)
    except ValidationError as exc:
        problems = []
        for error in exc.errors(include_url=False, include_input=False):
            loc = [str(part) for part in error["loc"]]
            message = error["msg"].removeprefix("Value error, ")
            if not loc:  # a check across fields names its variables itself
                problems.append(message)
                continue
            inner = f" ({'.'.join(loc[1:])})" if len(loc) > 1 else ""
            problems.append(f"{source(loc[0])}{inner}: {message}")
        raise SettingsInvalid("; ".join(problems)) from None
    except SettingsError as exc:
        # pydantic-settings names the field but not the variable, and keeps the JSON
        # error as the cause.
        field = str(exc).split('"')[1] if str(exc).count('"') >= 2 else ""
        cause = f": {exc.__cause__}" if exc.__cause__ is not None else ""
        raise SettingsInvalid(f"{source(field)} is not valid{cause}") from None


def one_line(exc: BaseException) -> str | None:
    """What a person needs to act on an expected failure, on one line; None for a bug."""
    if isinstance(exc, InferbusError):
        text = str(exc)
    elif isinstance(exc, KafkaConnectionError):
        where = ", ".join(f"{host}:{port}" for host, port in _ADDRESS.findall(str(exc)))
        text = (
            f"cannot reach Kafka at {where or 'the bootstrap address'}; start the stack "
            "(`inferbus up`) or pass --bootstrap host:port (env INFERBUS_KAFKA_BOOTSTRAP)"
        )
    elif isinstance(exc, KafkaError):
        text = f"Kafka refused: {type(exc).__name__}: {exc}"
    elif isinstance(exc, ValidationError):
        text = f"invalid {exc.title}: {describe_validation_error(exc)}"
    elif isinstance(exc, TimeoutError):
        text = str(exc) or "timed out"
    elif isinstance(exc, OSError) and exc.filename is not None:
        text = f"{exc.strerror or type(exc).__name__}: {exc.filename}"
    elif isinstance(exc, OSError):
        text = str(exc) or type(exc).__name__
    else:
        return None
    return " ".join(text.split())


BootstrapOption = Annotated[
    str,
    typer.Option(
        "--bootstrap",
        "-b",
        envvar="INFERBUS_KAFKA_BOOTSTRAP",
        help="Kafka host:port.",
        callback=bootstrap_option,
    ),
]
"""`--bootstrap` of every command that talks to a running stack, checked."""

BROKEN_PIPE = 141
"""Exit status when the output's reader has gone (128 + SIGPIPE, as a shell reports it)."""


def _quiet_exit(console: Console) -> None:
    console.quiet = True
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    raise SystemExit(BROKEN_PIPE)


def broken_pipes_exit_141() -> None:
    """Every rich console of this process (tables, typer's help) ends a print to a reader
    that went with exit 141, as the rest of the CLI does: rich's own answer is exit 1
    (`inferbus --help | head` read as a failure). Called once, by the entry point."""
    Console.on_broken_pipe = _quiet_exit  # type: ignore[method-assign,assignment]


class OneLineErrors(TyperGroup):
    """The CLI's root group: an expected error ends the command with one line on stderr and
    exit 1, instead of a traceback. Anything else (a bug) keeps its traceback."""

    def invoke(self, ctx: Any) -> Any:  # typer's click Context (vendored since typer 0.2x)
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            # The reader went (`inferbus sim --help | head`): nobody to tell. Python would
            # say so again flushing stdout at exit, so it now points at /dev/null.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise typer.Exit(BROKEN_PIPE) from None
        except Exception as exc:
            message = one_line(exc)
            if message is None:
                raise
            typer.echo(f"error: {message}", err=True)
            raise typer.Exit(1) from None

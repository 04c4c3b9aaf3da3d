"""`inferbus trace REQUEST_ID` and `inferbus traces --slowest N`: stage breakdowns from Jaeger."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import httpx
import typer
from pydantic import TypeAdapter, ValidationError
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from schemas.errors import InferbusError, describe_validation_error
from schemas.request import RequestId
from schemas.result import InferenceResult, Timings
from tracing.attributes import STAGES
from tracing.jaeger import (
    DEFAULT_JAEGER_URL,
    DEFAULT_SERVICE,
    JAEGER_URL_ENV,
    SEARCH_DEPTH,
    Breakdown,
    InvalidTimings,
    JaegerClient,
    JaegerUnavailableError,
    breakdown_from_timings,
    duration_ms,
)

trace_app = typer.Typer(help="Request latency breakdowns from Jaeger traces.")


class TraceUnavailable(InferbusError):
    """No breakdown to show: Jaeger cannot answer and no usable result was given (the CLI
    says it on one `error:` line)."""


def jaeger_url(ctx: typer.Context, value: str) -> str:
    """`--jaeger` (or INFERBUS_JAEGER_URL) as an http(s) URL with a host, else refused:
    `garbage` or `http://` would only fail later as an unreachable Jaeger."""
    try:
        url = httpx.URL(value)
    except httpx.InvalidURL:
        url = httpx.URL()
    if url.scheme in ("http", "https") and url.host and (url.port or 1) <= 65535:
        return value
    problem = f"{value!r} is not an http(s) URL with a host, e.g. {DEFAULT_JAEGER_URL}"
    source = ctx.get_parameter_source("jaeger")  # typer's own click's enum: by name
    if source is not None and source.name == "ENVIRONMENT":
        raise TraceUnavailable(f"{JAEGER_URL_ENV}: {problem}")
    raise typer.BadParameter(problem)


MAX_LOOKBACK_S = 10 * 365 * 24 * 3600.0
"""Longer than any Jaeger keeps traces; beyond it the search's start is before 1970."""


def lookback(value: float) -> float:
    """`--lookback-s` as a finite number of seconds in (0, MAX_LOOKBACK_S]: NaN, infinity or
    1e30 ended in a traceback, 0 or a negative in Jaeger's HTTP 400 said as unavailable."""
    if not (math.isfinite(value) and 0 < value <= MAX_LOOKBACK_S):
        bound = f"{MAX_LOOKBACK_S:.0f} (ten years)"
        raise typer.BadParameter(f"must be a number of seconds > 0 and <= {bound}, got {value}")
    return value


_REQUEST_ID: TypeAdapter[str] = TypeAdapter(RequestId)


def request_id_argument(value: str) -> str:
    """A request id as requests carry them, else refused: no trace or result can have it."""
    try:
        return _REQUEST_ID.validate_python(value)
    except ValidationError:
        shown = value if len(value) <= 40 else f"{value[:40]}…"
        raise typer.BadParameter(
            f"{shown!r} is not a request id (1-128 of A-Z a-z 0-9 . _ : @ / -)"
        ) from None


JaegerUrl = Annotated[
    str,
    typer.Option(
        "--jaeger", envvar=JAEGER_URL_ENV, callback=jaeger_url, help="Jaeger query base URL."
    ),
]
Service = Annotated[str, typer.Option(help="Service whose spans carry the request id.")]
Lookback = Annotated[
    float,
    typer.Option("--lookback-s", callback=lookback, help="How far back to search, seconds."),
]

UNSTAGED = "not in a stage"
"""The row for e2e's time outside every stage: mostly the wait in the ingest topic before
ingest polled the request (e2e starts at the producer's send, `ingest` at ingest's poll),
then ingest's send of it to the tier topic; from a trace, also the result's way back."""

SHOWN_MS = 0.005
"""The least time the table shows as more than 0.00 ms."""


def staged_ms(stages_ms: Mapping[str, float], *, source: str = "result") -> float:
    """The stages' time within e2e. A result's e2e ends before `publish`; a trace's e2e (its
    first span's start to its last span's end) holds the publish span."""
    after = ("e2e", "publish") if source == "result" else ("e2e",)
    return sum(ms for stage, ms in stages_ms.items() if stage not in after)


def unstaged_ms(
    stages_ms: Mapping[str, float], e2e_ms: float | None, *, source: str = "result"
) -> float | None:
    """e2e less the stages within it; None when there is no e2e or nothing left (clocks of
    different hosts can make the rest negative: `render` says so)."""
    if e2e_ms is None:
        return None
    rest = e2e_ms - staged_ms(stages_ms, source=source)
    return rest if rest > 0 else None


def render(breakdown: Breakdown, console: Console) -> None:
    """One request's stages as a table, with each stage's share of e2e."""
    source = (
        f"Jaeger trace {breakdown.trace_id}"
        if breakdown.source == "jaeger"
        else "the result's timings (no trace)"
    )
    console.print(f"request {escape(breakdown.request_id)}: from {source}")
    if breakdown.status not in (None, "ok"):
        why = breakdown.error or "the result gives no reason"
        console.print(f"[red]status {breakdown.status}[/red]: {escape(why)}")
    e2e = breakdown.e2e_ms
    if breakdown.stages_ms or e2e is not None:
        console.print(_stage_table(breakdown))
    notes = list(breakdown.notes)
    within = staged_ms(breakdown.stages_ms, source=breakdown.source)
    if e2e is not None and within - e2e >= SHOWN_MS:
        notes.append(
            f"the stages add up to {within:.2f} ms, {within - e2e:.2f} ms more than e2e "
            f"({e2e:.2f} ms): the clocks that timed them disagree, so the shares overstate"
        )
    if e2e is None and breakdown.stages_ms and breakdown.status in (None, "ok"):
        notes.append("no e2e time: the stages' shares of e2e are unknown")
    if breakdown.services:
        console.print(f"services: {', '.join(breakdown.services)}")
    for note in notes:
        console.print(f"[yellow]note:[/yellow] {escape(note)}")


def _stage_table(breakdown: Breakdown) -> Table:
    table = Table()  # a title wraps at the table's width: the line above does not
    table.add_column("stage")
    table.add_column("ms", justify="right")
    table.add_column("% of e2e", justify="right")
    e2e = breakdown.e2e_ms
    for stage in STAGES:
        ms = breakdown.stages_ms.get(stage)
        if stage == "e2e" or ms is None:
            continue
        share = f"{100 * ms / e2e:.1f}" if e2e else "-"
        table.add_row(stage, f"{ms:.2f}", share)
    other = unstaged_ms(breakdown.stages_ms, e2e, source=breakdown.source)
    if other is not None and e2e:
        table.add_row(UNSTAGED, f"{other:.2f}", f"{100 * other / e2e:.1f}")
    table.add_row("e2e", f"{e2e:.2f}" if e2e is not None else "-", "100.0" if e2e else "-")
    return table


@dataclass(frozen=True, slots=True)
class ResultFile:
    """What `--result-json` gave: an `InferenceResult`'s id, status and timings, or bare
    timings (a `Timings` object)."""

    request_id: str | None
    status: str | None
    error: str | None
    timings: Mapping[str, float | None]


_RESULT_FIELDS = frozenset({"request_id", "model", "status", "timings"})
"""Fields that make a file a result rather than bare timings."""
_JSON_KINDS = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
PASS_RESULT = "pass the result JSON that `inferbus infer` printed for the request"


def load_result(path: Path) -> ResultFile:
    """A result file as the result schema reads it, or TraceUnavailable naming what is wrong:
    the file, its encoding, its JSON, the field at fault, or timings that are not durations."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise TraceUnavailable(f"{path} does not exist; {PASS_RESULT}") from None
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        raise TraceUnavailable(f"cannot read {path} ({why}); {PASS_RESULT}") from None
    try:
        text = raw.decode("utf-8-sig")
        data = json.loads(text)
    except UnicodeDecodeError as exc:
        raise TraceUnavailable(
            f"{path} is not UTF-8 text (byte {exc.start}); {PASS_RESULT}"
        ) from None
    except ValueError as exc:  # not JSON, or a number of more digits than Python reads
        raise TraceUnavailable(f"{path} is not JSON ({exc}); {PASS_RESULT}") from None
    if not isinstance(data, dict):
        kind = _JSON_KINDS.get(type(data), "a number")
        raise TraceUnavailable(f"{path} holds {kind}, not a result object; {PASS_RESULT}")
    is_result = not _RESULT_FIELDS.isdisjoint(data)
    try:
        if is_result:
            result = InferenceResult.model_validate_json(text, strict=True)
            found = ResultFile(
                result.request_id,
                result.status,
                result.error.message if result.error else None,
                result.timings.model_dump(),
            )
        else:
            found = ResultFile(
                None, None, None, Timings.model_validate_json(text, strict=True).model_dump()
            )
    except ValidationError as exc:
        what = "a valid result" if is_result else "valid timings"
        detail = describe_validation_error(exc)
        raise TraceUnavailable(f"{path} is not {what} ({detail}); {PASS_RESULT}") from None
    prefix = "timings." if is_result else ""
    try:
        for key, value in found.timings.items():
            if value is not None:
                duration_ms(prefix + key, value)
    except InvalidTimings as exc:
        raise TraceUnavailable(f"{path}: {exc}; {PASS_RESULT}") from None
    if found.status in (None, "ok") and all(v is None for v in found.timings.values()):
        fields = "`timings`" if is_result else "`ingest_ms` … `e2e_ms`"
        raise TraceUnavailable(f"{path} holds no stage timings ({fields}); {PASS_RESULT}")
    return found


def trace_command(
    request_id: Annotated[
        str, typer.Argument(callback=request_id_argument, help="The request id to explain.")
    ],
    jaeger: JaegerUrl = DEFAULT_JAEGER_URL,
    result_json: Annotated[
        Path | None,
        typer.Option("--result-json", help="Result JSON to fall back on when Jaeger can't answer."),
    ] = None,
    service: Service = DEFAULT_SERVICE,
    lookback_s: Lookback = 3600.0,
) -> None:
    """Print a request's stage breakdown from Jaeger, or from its result's timings."""
    console = Console()
    reason: str
    try:
        with JaegerClient(jaeger) as client:
            breakdown = client.request_breakdown(request_id, service=service, lookback_s=lookback_s)
    except JaegerUnavailableError as exc:
        reason = f"Jaeger at {exc.url} unavailable ({exc.reason})"
    else:
        if breakdown is not None:
            render(breakdown, console)
            return
        reason = (
            f"no trace for request {request_id} in Jaeger at {jaeger} (service {service}, "
            f"last {lookback_s:g} s, newest {SEARCH_DEPTH} traces)"
        )
    if result_json is None:
        raise TraceUnavailable(f"{reason}; pass --result-json to use the result's timings")
    found = load_result(result_json)
    if found.request_id is not None and found.request_id != request_id:
        raise TraceUnavailable(
            f"{result_json} is the result of request {found.request_id}, not {request_id}; "
            "pass that request's result"
        )
    breakdown = breakdown_from_timings(
        request_id,
        found.timings,
        note=f"{reason}; used {result_json}",
        status=found.status,
        error=found.error,
    )
    render(breakdown, console)


def traces_command(
    slowest: Annotated[int, typer.Option("--slowest", min=1, help="How many traces.")] = 10,
    jaeger: JaegerUrl = DEFAULT_JAEGER_URL,
    service: Service = DEFAULT_SERVICE,
    lookback_s: Lookback = 3600.0,
) -> None:
    """Print the slowest recent requests' stage breakdowns."""
    console = Console()
    try:
        with JaegerClient(jaeger) as client:
            breakdowns = client.slowest(slowest, service=service, lookback_s=lookback_s)
    except JaegerUnavailableError as exc:
        raise TraceUnavailable(
            f"Jaeger at {exc.url} unavailable ({exc.reason}); start it (docs/tracing.md) or "
            "pass --jaeger URL"
        ) from None
    if not breakdowns:
        console.print(f"no request traces from {service} in the last {lookback_s:.0f} s")
        return
    for breakdown in breakdowns:
        render(breakdown, console)


trace_app.command("trace")(trace_command)
trace_app.command("traces")(traces_command)

"""`inferbus trace REQUEST_ID` and `inferbus traces --slowest N`: stage breakdowns from Jaeger."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from schemas.errors import InferbusError
from tracing.attributes import STAGES
from tracing.jaeger import (
    DEFAULT_JAEGER_URL,
    DEFAULT_SERVICE,
    JAEGER_URL_ENV,
    Breakdown,
    JaegerClient,
    JaegerUnavailableError,
    breakdown_from_timings,
)

trace_app = typer.Typer(help="Request latency breakdowns from Jaeger traces.")

JaegerUrl = Annotated[
    str, typer.Option("--jaeger", envvar=JAEGER_URL_ENV, help="Jaeger query base URL.")
]
Service = Annotated[str, typer.Option(help="Service whose spans carry the request id.")]
Lookback = Annotated[float, typer.Option("--lookback-s", help="How far back to search, seconds.")]


class TraceUnavailable(InferbusError):
    """No breakdown to show: Jaeger cannot answer and no usable result was given (the CLI
    says it on one `error:` line)."""


UNSTAGED = "not in a stage"
"""The row for e2e's time outside every stage: mostly the wait in the ingest topic before
ingest polled the request (e2e starts at the producer's send, `ingest` at ingest's poll),
then ingest's send of it to the tier topic."""


def unstaged_ms(stages_ms: Mapping[str, float], e2e_ms: float | None) -> float | None:
    """e2e less the stages within it (`publish` comes after e2e ends); None when there is no
    e2e or nothing left (clocks of different hosts can make the rest negative)."""
    if e2e_ms is None:
        return None
    within = sum(ms for stage, ms in stages_ms.items() if stage not in ("e2e", "publish"))
    rest = e2e_ms - within
    return rest if rest > 0 else None


def render(breakdown: Breakdown, console: Console) -> None:
    """One request's stages as a table, with each stage's share of e2e."""
    source = (
        f"Jaeger trace {breakdown.trace_id}"
        if breakdown.source == "jaeger"
        else "the result's timings (no trace)"
    )
    console.print(f"request {breakdown.request_id}: from {source}")
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
    other = unstaged_ms(breakdown.stages_ms, e2e)
    if other is not None and e2e:
        table.add_row(UNSTAGED, f"{other:.2f}", f"{100 * other / e2e:.1f}")
    table.add_row("e2e", f"{e2e:.2f}" if e2e is not None else "-", "100.0" if e2e else "-")
    console.print(table)
    if breakdown.services:
        console.print(f"services: {', '.join(breakdown.services)}")
    for note in breakdown.notes:
        console.print(f"[yellow]note:[/yellow] {note}")


def load_timings(path: Path) -> tuple[str | None, dict[str, Any]]:
    """(request id, timings) from an `InferenceResult` JSON, or a bare timings object."""
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise TraceUnavailable(f"{path} is not JSON ({exc}); pass a result's JSON") from None
    if not isinstance(data, dict):
        raise typer.BadParameter(f"{path} does not hold a JSON object")
    timings = data.get("timings", data)
    if not isinstance(timings, dict):
        raise typer.BadParameter(f"{path}: `timings` is not an object")
    request_id = data.get("request_id")
    return (str(request_id) if request_id else None), timings


def trace_command(
    request_id: Annotated[str, typer.Argument(help="The request id to explain.")],
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
        reason = f"no trace for request {request_id} in Jaeger at {jaeger}"
    if result_json is None:
        raise TraceUnavailable(f"{reason}; pass --result-json to use the result's timings")
    found_id, timings = load_timings(result_json)
    if found_id is not None and found_id != request_id:
        raise TraceUnavailable(
            f"{result_json} is the result of request {found_id}, not {request_id}; "
            "pass that request's result"
        )
    render(
        breakdown_from_timings(request_id, timings, note=f"{reason}; used {result_json}"), console
    )


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

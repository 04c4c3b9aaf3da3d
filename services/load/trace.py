"""Replay a window of a timestamped trace (`TIMESTAMP,ContextTokens,...`), e.g. the Azure one.

Arrival times keep their gaps; `rate_scale` multiplies the rate without inventing bursts
(scaler.sim.workload.scale_rate); context sizes become input lengths scaled by
`token_scale` and clipped to what the model takes, so a trace of LLM prompts (median ~1,000
tokens) exercises an encoder with up to 512 while keeping its spread.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from scaler.sim.workload import FloatArray, Phase, Workload, WorkloadError, read_trace, scale_rate
from scaler.sim.workload import split_tiers as _split_tiers
from schemas.topics import Tier
from services.load.limits import duration, non_negative, positive, within_request_cap


def window(
    times: FloatArray, tokens: FloatArray, start_s: float, duration_s: float
) -> tuple[FloatArray, FloatArray]:
    """The requests in [start_s, start_s + duration_s), re-timed from 0."""
    keep = (times >= start_s) & (times < start_s + duration_s)
    return times[keep] - start_s, tokens[keep]


def input_lengths(context: FloatArray, token_scale: float, max_tokens: int) -> FloatArray:
    """Context tokens × `token_scale`, rounded, clipped to 1..max_tokens."""
    return np.clip(np.round(context * token_scale), 1, max_tokens)


def trace_workload(
    path: Path,
    *,
    start_s: float,
    duration_s: float,
    rate_scale: float,
    token_scale: float,
    max_tokens: int,
    tiers: Sequence[Tier],
    seed: int = 1,
) -> Workload:
    """A bounded replay of `path`: `duration_s` of it from `start_s`, rate and lengths mapped."""
    duration("--duration", duration_s)
    non_negative("--trace-start", start_s, " seconds")
    positive("--token-scale", token_scale)
    positive("--rate-scale", rate_scale)
    times, context = read_trace(path)
    span_s = float(times[-1]) if times.size else 0.0
    times, context = window(times, context, start_s, duration_s)
    if times.size == 0:
        raise WorkloadError(
            f"{path}: no request between {start_s:g} s and {start_s + duration_s:g} s; the "
            f"trace spans {span_s:.0f} s: pick another --trace-start",
            path=str(path),
        )
    within_request_cap(times.size * rate_scale)
    rng = np.random.default_rng(seed)
    times, context = scale_rate(times, context, rate_scale, rng)
    keep = times < duration_s  # copies of the last request may land past the window
    times, context = times[keep], context[keep]
    return Workload(
        name=path.stem,
        source=(
            f"trace {path.name} from {start_s:g} s for {duration_s:g} s, rate x{rate_scale:g}, "
            f"tokens x{token_scale:g} (max {max_tokens})"
        ),
        duration_s=duration_s,
        tiers=_split_tiers(times, input_lengths(context, token_scale, max_tokens), tiers, rng),
        phases=(Phase("trace", 0, duration_s),),
    )

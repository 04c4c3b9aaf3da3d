"""The four live scenarios, sized for a small machine, each with the shape it should show.

They are short versions of the simulator's scenarios (scaler/sim/scenarios.py): the same
story in 90 seconds instead of half an hour, at rates a 2-core machine running the whole
embedded stack can serve with demo-encoder. `rate_scale` multiplies every rate.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from scaler.sim.scenarios import poisson_arrivals
from scaler.sim.workload import FloatArray, Phase, TierArrivals, Workload, WorkloadError
from schemas.topics import Tier
from services.load.limits import duration, positive, within_request_cap

_BIN_S = 0.1  # poisson_arrivals samples its rate every 0.1 s
_DURATION_S = 90.0
"""Every live scenario's length, seconds."""


def lengths(
    n: int, median: float, spread: float, bounds: tuple[int, int], rng: np.random.Generator
) -> FloatArray:
    """Log-normal input lengths in tokens, clipped to bounds (low, high)."""
    return np.clip(np.round(rng.lognormal(np.log(median), spread, n)), *bounds)


def steps(duration_s: float, *pieces: tuple[float, float, float]) -> FloatArray:
    """A rate every 0.1 s from (start_s, end_s, rps) pieces; later pieces win, 0 elsewhere."""
    t = np.arange(0.0, duration_s, _BIN_S)
    rate = np.zeros(t.size)
    for start, end, rps in pieces:
        rate[(t >= start) & (t < end)] = rps
    return rate


def ramp(duration_s: float, start: float, end: float, low: float, high: float) -> FloatArray:
    """A rate going linearly from `low` at `start` to `high` at `end` (flat outside)."""
    t = np.arange(0.0, duration_s, _BIN_S)
    return low + (high - low) * np.clip((t - start) / max(end - start, 1e-9), 0.0, 1.0)


@dataclass(frozen=True)
class LiveScenario:
    """A named workload and what it should look like on a healthy stack."""

    name: str
    summary: str
    expected: str
    build: Callable[[np.random.Generator, float], Workload]
    focus_phase: str
    """The phase the report looks at first (the burst, the long inputs, ...)."""


def _arrivals(rate: FloatArray, rng: np.random.Generator) -> FloatArray:
    within_request_cap(float(rate.sum()) * _BIN_S)  # before drawing: a typo costs no memory
    return poisson_arrivals(rate, rng)


def _live(
    name: str, scale: float, *, tiers: dict[Tier, TierArrivals], phases: tuple[Phase, ...]
) -> Workload:
    """A live scenario's workload; its `source` names the scenario and the rate scale."""
    return Workload(
        name=name,
        source=f"scenario {name} x{scale:g}",
        duration_s=_DURATION_S,
        tiers=tiers,
        phases=phases,
    )


def burst(rng: np.random.Generator, scale: float) -> Workload:
    """Short interactive requests, 40/s with a 30 s burst at 240/s (x6)."""
    times = _arrivals(steps(_DURATION_S, (0, 90, 40 * scale), (20, 50, 240 * scale)), rng)
    return _live(
        "burst",
        scale,
        tiers={"interactive": TierArrivals(times, lengths(times.size, 128, 0.3, (32, 256), rng))},
        phases=(Phase("before", 0, 20), Phase("burst", 20, 50), Phase("after", 50, 90)),
    )


def long_context(rng: np.random.Generator, scale: float) -> Workload:
    """15/s throughout; the inputs turn long (median 64 -> 450 tokens) for a minute."""
    times = _arrivals(steps(_DURATION_S, (0, 90, 15 * scale)), rng)
    long = (times >= 15) & (times < 75)
    tokens = np.where(
        long,
        lengths(times.size, 450, 0.1, (256, 512), rng),
        lengths(times.size, 64, 0.4, (8, 256), rng),
    )
    return _live(
        "long-context",
        scale,
        tiers={"interactive": TierArrivals(times, tokens)},
        phases=(Phase("short", 0, 15), Phase("long", 15, 75), Phase("short-again", 75, 90)),
    )


def mixed(rng: np.random.Generator, scale: float) -> Workload:
    """Interactive 30/s (short) beside batch 10/s (longer) that doubles to 20/s for 30 s."""
    ti = _arrivals(steps(_DURATION_S, (0, 90, 30 * scale)), rng)
    tb = _arrivals(steps(_DURATION_S, (0, 90, 10 * scale), (30, 60, 20 * scale)), rng)
    return _live(
        "mixed",
        scale,
        tiers={
            "interactive": TierArrivals(ti, lengths(ti.size, 64, 0.4, (8, 256), rng)),
            "batch": TierArrivals(tb, lengths(tb.size, 192, 0.3, (64, 512), rng)),
        },
        phases=(Phase("base", 0, 30), Phase("batch-x2", 30, 60), Phase("base-again", 60, 90)),
    )


def warmup(rng: np.random.Generator, scale: float) -> Workload:
    """20/s, a 10 s ramp to 200/s held 35 s (faster than a worker starts), then 20/s."""
    rate = ramp(_DURATION_S, 15, 25, 20 * scale, 200 * scale)
    rate[np.arange(0.0, _DURATION_S, _BIN_S) >= 60] = 20 * scale
    times = _arrivals(rate, rng)
    return _live(
        "warmup",
        scale,
        tiers={"interactive": TierArrivals(times, lengths(times.size, 128, 0.3, (32, 256), rng))},
        phases=(Phase("low", 0, 15), Phase("ramp", 15, 60), Phase("low-again", 60, 90)),
    )


SCENARIOS: dict[str, LiveScenario] = {
    s.name: s
    for s in (
        LiveScenario(
            "burst",
            "short interactive requests (median 128 tokens): 40/s, a burst at 240/s from 20 s "
            "to 50 s, 40/s again until 90 s",
            "the backlog grows from 20 s until the replicas the scaler adds are ready and serve "
            "more than 240/s (or until the burst ends, where they cannot); it drains after; "
            "interactive p99 breaches its SLO during the burst and recovers; nothing is lost",
            burst,
            "burst",
        ),
        LiveScenario(
            "long-context",
            "interactive 15/s; inputs of median 64 tokens, 450 tokens from 15 s to 75 s",
            "engine time per request rises several-fold while the inputs are long and queue "
            "wait stays small: the load is engine-bound, not a backlog; interactive p99 stays "
            "within its SLO; the scaler does not add replicas for long inputs alone; nothing "
            "is lost",
            long_context,
            "long",
        ),
        LiveScenario(
            "mixed",
            "interactive 30/s (median 64 tokens) beside batch 10/s (median 192 tokens) that "
            "doubles to 20/s from 30 s to 60 s",
            "interactive p99 stays within its SLO in every phase while batch doubles: batch "
            "has its own topic, workers and a looser SLO; batch latency may rise; nothing is "
            "lost",
            mixed,
            "batch-x2",
        ),
        LiveScenario(
            "warmup",
            "interactive (median 128 tokens): 20/s, a ramp to 200/s from 15 s to 25 s held "
            "until 60 s, 20/s until 90 s",
            "the scaler decides a scale-out within a tick or two of the ramp; the new replicas "
            "show as loading/warming in the registry while the backlog grows; once ready the "
            "backlog drains; nothing is lost",
            warmup,
            "ramp",
        ),
    )
}
"""Every live scenario by name."""


def scenario_workload(name: str, *, rate_scale: float = 1.0, seed: int = 1) -> Workload:
    """A live scenario's arrivals (same seed, same arrivals)."""
    if name not in SCENARIOS:
        raise WorkloadError(f"unknown scenario {name!r}; choose one of {', '.join(SCENARIOS)}")
    positive("--rate-scale", rate_scale)
    return SCENARIOS[name].build(np.random.default_rng(seed), rate_scale)


def clip_lengths(workload: Workload, max_tokens: int) -> tuple[Workload, int]:
    """The workload with every input at most `max_tokens` long, and how many were longer.

    A scenario's lengths go up to 512 tokens; a model that takes fewer would answer those
    requests `invalid_input`, and the run would fail on what the scenario chose, not on
    what inferbus did.
    """
    clipped = sum(int(np.count_nonzero(a.tokens > max_tokens)) for a in workload.tiers.values())
    if not clipped:
        return workload, 0
    tiers = {
        tier: TierArrivals(a.times, np.minimum(a.tokens, float(max_tokens)))
        for tier, a in workload.tiers.items()
    }
    return replace(workload, tiers=tiers), clipped


def rate_workload(
    rate_rps: float,
    duration_s: float,
    tiers: list[Tier],
    *,
    tokens: int,
    seed: int = 1,
) -> Workload:
    """Poisson arrivals at `rate_rps` in all, split evenly over `tiers`, inputs of `tokens`."""
    positive("--rate", rate_rps, " requests/s")
    duration("--duration", duration_s)
    if tokens < 1:
        raise WorkloadError("--tokens must be >= 1")
    rng = np.random.default_rng(seed)
    share = rate_rps / len(tiers)
    arrivals: dict[Tier, TierArrivals] = {}
    for tier in tiers:
        times = _arrivals(steps(duration_s, (0, duration_s, share)), rng)
        arrivals[tier] = TierArrivals(times, np.full(times.size, float(tokens)))
    return Workload(
        name="rate",
        source=f"rate {rate_rps:g}/s for {duration_s:g} s over {', '.join(tiers)}",
        duration_s=duration_s,
        tiers=arrivals,
        phases=(Phase("steady", 0, duration_s),),
    )

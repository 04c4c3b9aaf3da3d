"""Named synthetic workloads, seeded: burst, long-context, mixed and warmup."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from scaler.sim.workload import FloatArray, Phase, TierArrivals, Workload, WorkloadError

_BIN_S = 0.1


def poisson_arrivals(rate_rps: FloatArray, rng: np.random.Generator) -> FloatArray:
    """Non-homogeneous Poisson arrivals from a rate sampled every 0.1 s."""
    counts = rng.poisson(np.maximum(rate_rps, 0.0) * _BIN_S)
    starts = np.repeat(np.arange(rate_rps.size) * _BIN_S, counts)
    return np.sort(starts + rng.random(starts.size) * _BIN_S)


def _grid(duration_s: float) -> FloatArray:
    return np.arange(0.0, duration_s, _BIN_S)


def _tokens(n: int, median: float, spread: float, rng: np.random.Generator) -> FloatArray:
    """Log-normal input lengths, clipped to 1..512 tokens."""
    return np.clip(np.round(rng.lognormal(np.log(median), spread, n)), 1, 512)


def _ramp(t: FloatArray, start: float, end: float, low: float, high: float) -> FloatArray:
    """Rate going linearly from low at `start` to high at `end`."""
    return low + (high - low) * np.clip((t - start) / max(end - start, 1e-9), 0.0, 1.0)


def burst(rng: np.random.Generator) -> Workload:
    """Short requests at 150/s with two bursts: x2.5 for 120 s and x2 for 60 s."""
    t = _grid(1500.0)
    rate = np.full(t.size, 150.0)
    rate[(t >= 360) & (t < 480)] = 375.0
    rate[(t >= 900) & (t < 960)] = 300.0
    times = poisson_arrivals(rate, rng)
    return Workload(
        name="burst",
        source="scenario burst",
        duration_s=1500.0,
        tiers={"interactive": TierArrivals(times, _tokens(times.size, 64, 0.5, rng))},
        phases=(Phase("burst-1", 360, 480), Phase("burst-2", 900, 960)),
    )


def long_context(rng: np.random.Generator) -> Workload:
    """Steady 150/s whose inputs turn long (median 64 → 450 tokens) for 10 minutes."""
    t = _grid(1500.0)
    rate = _ramp(t, 0, 120, 60.0, 150.0)
    times = poisson_arrivals(rate, rng)
    long = (times >= 420) & (times < 1020)
    tokens = np.where(long, _tokens(times.size, 450, 0.2, rng), _tokens(times.size, 64, 0.5, rng))
    return Workload(
        name="long-context",
        source="scenario long-context",
        duration_s=1500.0,
        tiers={"interactive": TierArrivals(times, tokens)},
        phases=(Phase("long", 420, 1020),),
    )


def mixed(rng: np.random.Generator) -> Workload:
    """Interactive 150/s with a slow wave, batch floods of 900/s every 8 min, shared budget."""
    t = _grid(1800.0)
    interactive = 150.0 + 60.0 * np.sin(2 * np.pi * t / 900.0)
    batch = np.full(t.size, 20.0)
    for start in (240.0, 720.0, 1200.0):
        batch[(t >= start) & (t < start + 120)] = 900.0
    ti, tb = poisson_arrivals(interactive, rng), poisson_arrivals(batch, rng)
    return Workload(
        name="mixed",
        source="scenario mixed",
        duration_s=1800.0,
        tiers={
            "interactive": TierArrivals(ti, _tokens(ti.size, 96, 0.6, rng)),
            "batch": TierArrivals(tb, _tokens(tb.size, 256, 0.4, rng)),
        },
        phases=tuple(
            Phase(f"batch-peak-{i + 1}", s, s + 120) for i, s in enumerate((240, 720, 1200))
        ),
        overrides={"max_total_replicas": 24.0},
    )


def warmup(rng: np.random.Generator) -> Workload:
    """40/s to 420/s twice: over 600 s (slower than its 60 s time-to-ready), then over 20 s."""
    t = _grid(2400.0)
    slow = _ramp(t, 120, 720, 40.0, 420.0) * (t < 1020)
    fast = _ramp(t, 1620, 1640, 40.0, 420.0) * (t >= 1020)
    rate = np.maximum(slow + fast, 40.0)
    times = poisson_arrivals(rate, rng)
    return Workload(
        name="warmup",
        source="scenario warmup",
        duration_s=2400.0,
        tiers={"interactive": TierArrivals(times, _tokens(times.size, 96, 0.6, rng))},
        phases=(Phase("slow-ramp", 120, 1020), Phase("fast-ramp", 1620, 2400)),
        overrides={"time_to_ready_s": 60.0},
    )


SCENARIOS: dict[str, Callable[[np.random.Generator], Workload]] = {
    "burst": burst,
    "long-context": long_context,
    "mixed": mixed,
    "warmup": warmup,
}
"""Every named scenario."""


def scenario(name: str, seed: int) -> Workload:
    """Build a named scenario with a seeded generator (same seed, same arrivals)."""
    try:
        build = SCENARIOS[name]
    except KeyError:
        raise WorkloadError(
            f"unknown scenario {name!r}; choose one of {sorted(SCENARIOS)}"
        ) from None
    return build(np.random.default_rng(seed))

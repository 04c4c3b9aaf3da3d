"""Write traffic shapes the scaler was never tuned on, as trace CSVs for `inferbus sim --trace`.

    python scripts/unseen_traffic.py OUT_DIR [--seed 1] [--set stop42|stop49]

The five families of `inferbus scaler traffic` are the tuning set; these are held out, each
at the conversation trace's scale (a few requests per second, so `--rate-scale 20|30`
reads like the families). Stop 42's set (the default):

- `spikes`: 2/s with spikes of 18-30/s lasting 5-10 s, every 45-120 s (shorter than a cold
  start: only capacity held before a spike serves it);
- `mmpp`: a three-level Markov-modulated Poisson process (1, 5, 15/s, dwell ~90 s);
- `randwalk`: a rate whose log is a bounded random walk around 5/s;
- `staircase`: 1, 2, 4, 8, 12, 8, 4, 2, 1/s, about 6.7 minutes a step.

Stop 49's set, shapes a skeptical user tries first:

- `steady`: 5/s all hour;
- `ramp`: 1/s rising linearly to 12/s;
- `cliff`: 10/s for 20 minutes, then 2/s;
- `periodic`: 3/s, and 15/s for the first minute of every five (a job on a schedule);
- `pareto`: 8-16/s bursts of Pareto lengths (5 s up to 5 min) after Pareto gaps (10 s up to
  6.7 min), 0.5/s between;
- `fastwave`: a sine of 6 ± 5/s with a 10-minute period;
- `doubling`: 1/s doubling every 15 minutes, to at most 16/s;
- `noisy`: 6/s times a log-normal factor drawn every 30 s;
- `rare`: 0.3/s with two 3-minute bursts of 14/s.

Context and output lengths are drawn as the families draw them (`scaler.sim.traffic`).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import numpy as np

from scaler.sim.scenarios import poisson_arrivals
from scaler.sim.traffic import (
    BIN_S,
    DURATION_S,
    Traffic,
    conv_context_tokens,
    generated_tokens,
    grid,
    write_csv,
)
from scaler.sim.workload import FloatArray

Shape = Callable[[int, np.random.Generator], FloatArray]


def spikes(n: int, rng: np.random.Generator) -> FloatArray:
    """2/s, with spikes of 18-30/s for 5-10 s every 45-120 s."""
    rate = np.full(n, 2.0)
    at = float(rng.uniform(20, 60))
    while at < DURATION_S:
        length = float(rng.uniform(5, 10))
        rate[int(at / BIN_S) : int((at + length) / BIN_S)] = float(rng.uniform(18, 30))
        at += length + float(rng.uniform(45, 120))
    return rate


def mmpp(n: int, rng: np.random.Generator) -> FloatArray:
    """Three levels (1, 5, 15/s), each held an exponential ~90 s, then another at random."""
    levels = (1.0, 5.0, 15.0)
    rate = np.empty(n)
    at, level = 0, 1
    while at < n:
        dwell = int(rng.exponential(90.0) / BIN_S) + 1
        rate[at : at + dwell] = levels[level]
        at += dwell
        level = int(rng.choice([x for x in range(len(levels)) if x != level]))
    return rate


def randwalk(n: int, rng: np.random.Generator) -> FloatArray:
    """A log-rate random walk, clipped to ±1.6 around its mean, scaled to a mean of 5/s."""
    walk = np.cumsum(rng.normal(0.0, 0.02, n))
    level: FloatArray = np.exp(np.clip(walk - walk.mean(), -1.6, 1.6))
    return level * (5.0 / float(level.mean()))


def staircase(n: int, rng: np.random.Generator) -> FloatArray:
    """Up and down steps of 1, 2, 4, 8, 12/s."""
    del rng  # the same stairs for every seed; only the arrivals differ
    steps = (1.0, 2.0, 4.0, 8.0, 12.0, 8.0, 4.0, 2.0, 1.0)
    each = n // len(steps)
    rate = np.full(n, steps[-1])
    for i, level in enumerate(steps):
        rate[i * each : (i + 1) * each] = level
    return rate


def steady(n: int, rng: np.random.Generator) -> FloatArray:
    """5/s all hour."""
    del rng
    return np.full(n, 5.0)


def ramp(n: int, rng: np.random.Generator) -> FloatArray:
    """1/s rising linearly to 12/s."""
    del rng
    return np.linspace(1.0, 12.0, n)


def cliff(n: int, rng: np.random.Generator) -> FloatArray:
    """10/s for the first third of the hour, then 2/s."""
    del rng
    rate = np.full(n, 10.0)
    rate[n // 3 :] = 2.0
    return rate


def periodic(n: int, rng: np.random.Generator) -> FloatArray:
    """3/s, and 15/s for the first minute of every five."""
    del rng
    rate = np.full(n, 3.0)
    rate[(np.arange(n) * BIN_S) % 300 < 60] = 15.0
    return rate


def pareto(n: int, rng: np.random.Generator) -> FloatArray:
    """0.5/s, with 8-16/s bursts of Pareto lengths after Pareto gaps (heavy tails both)."""
    rate = np.full(n, 0.5)
    at = 0.0
    while at < DURATION_S:
        length = min(300.0, 5.0 * (1 + float(rng.pareto(1.5))))
        rate[int(at / BIN_S) : int((at + length) / BIN_S)] = float(rng.uniform(8, 16))
        at += length + min(400.0, 10.0 * (1 + float(rng.pareto(1.2))))
    return rate


def fastwave(n: int, rng: np.random.Generator) -> FloatArray:
    """A sine of 6 ± 5/s with a 10-minute period."""
    del rng
    return 6.0 + 5.0 * np.sin(2 * np.pi * np.arange(n) * BIN_S / 600.0)


def doubling(n: int, rng: np.random.Generator) -> FloatArray:
    """1/s doubling every 15 minutes, to at most 16/s."""
    del rng
    rate: FloatArray = np.minimum(2.0 ** (np.arange(n) * BIN_S / 900.0), 16.0)
    return rate


def noisy(n: int, rng: np.random.Generator) -> FloatArray:
    """6/s times a log-normal factor (sigma 0.5, mean 1) drawn every 30 s."""
    hold = max(1, int(30 / BIN_S))
    factors = np.exp(rng.normal(0.0, 0.5, n // hold + 1) - 0.125)
    rate: FloatArray = 6.0 * np.repeat(factors, hold)[:n]
    return rate


def rare(n: int, rng: np.random.Generator) -> FloatArray:
    """0.3/s, with two 3-minute bursts of 14/s (at 15 and 45 minutes)."""
    del rng
    rate = np.full(n, 0.3)
    t = np.arange(n) * BIN_S
    for start in (900.0, 2700.0):
        rate[(t > start) & (t < start + 180.0)] = 14.0
    return rate


SETS: dict[str, dict[str, Shape]] = {
    "stop42": {"spikes": spikes, "mmpp": mmpp, "randwalk": randwalk, "staircase": staircase},
    "stop49": {
        "steady": steady,
        "ramp": ramp,
        "cliff": cliff,
        "periodic": periodic,
        "pareto": pareto,
        "fastwave": fastwave,
        "doubling": doubling,
        "noisy": noisy,
        "rare": rare,
    },
}
SHAPES: dict[str, Shape] = {name: shape for group in SETS.values() for name, shape in group.items()}


def unseen(name: str, seed: int) -> Traffic:
    """One seeded instance of a held-out shape."""
    rng = np.random.default_rng(seed)
    times = poisson_arrivals(SHAPES[name](grid().size, rng), rng)
    n = times.size
    return Traffic(name, seed, times, conv_context_tokens(n, rng), generated_tokens(n, rng))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--set", choices=sorted(SETS), default="stop42")
    args = parser.parse_args()
    for name in SETS[args.set]:
        traffic = unseen(name, args.seed)
        path = args.out_dir / f"{name}-s{args.seed}.csv"
        write_csv(traffic, path)
        print(f"{path}: {traffic.times.size} requests")


if __name__ == "__main__":
    main()

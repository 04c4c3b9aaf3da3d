"""Seeded traffic families written as trace CSVs, in the form of the Azure LLM trace.

Each family is a rate shape at the conversation trace's scale (a few requests per
second, like `shared/traces/azure_llm_conv_2023.csv`: Azure LLM inference trace 2023,
CC-BY 4.0, Patel et al., "Splitwise", ISCA 2024), so `inferbus sim --trace FILE
--rate-scale X` treats a generated file exactly like the real one. Arrivals are a
Poisson process on the shape times a slow log-normal (Ornstein-Uhlenbeck) wobble sized to
the real trace's over-dispersion around its local mean (5 s counts vs their 60 s mean:
variance/mean 1.08 in the trace, ~1.07 here; 15 s vs 300 s: 1.69 and ~1.9);
context lengths are log-normal with the real trace's median and spread (1020 tokens,
log-sd 0.98). Everything random comes from one seeded generator: a seed is a new
instance of the family (other burst times, lengths and peaks), not just new noise.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from scaler.sim.scenarios import poisson_arrivals
from scaler.sim.workload import FloatArray, WorkloadError

BIN_S = 0.1
"""Resolution of every rate shape (the same grid `poisson_arrivals` samples)."""
DURATION_S = 3600.0
"""Every family lasts one hour, like the conversation trace."""
_EPOCH = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


@dataclass(frozen=True)
class Traffic:
    """Arrival times (s from 0) with each request's context and generated tokens."""

    family: str
    seed: int
    times: FloatArray
    context_tokens: FloatArray
    generated_tokens: FloatArray

    def __post_init__(self) -> None:
        n = self.times.size
        if self.context_tokens.size != n or self.generated_tokens.size != n:
            raise WorkloadError("times and token columns differ in length")


def grid(duration_s: float = DURATION_S) -> FloatArray:
    """Bin start times of a rate shape."""
    return np.arange(0.0, duration_s, BIN_S)


def wobble(
    n: int, rng: np.random.Generator, sigma: float = 0.1, tau_s: float = 120.0
) -> FloatArray:
    """A mean-one log-normal multiplier whose log is an OU process (sd `sigma`, memory `tau_s`)."""
    keep = float(np.exp(-BIN_S / tau_s))
    shocks = rng.normal(0.0, sigma * np.sqrt(1 - keep * keep), n)
    x = np.empty(n)
    level = rng.normal(0.0, sigma)
    for i in range(n):
        level = keep * level + shocks[i]
        x[i] = level
    return np.exp(x - sigma * sigma / 2)


def conv_context_tokens(n: int, rng: np.random.Generator) -> FloatArray:
    """Context lengths like the conversation trace: log-normal, median 1020, log-sd 0.98."""
    return np.clip(np.round(rng.lognormal(np.log(1020.0), 0.98, n)), 1, 8192)


def generated_tokens(n: int, rng: np.random.Generator) -> FloatArray:
    """Output lengths (unused by the simulator, kept for the CSV form)."""
    return np.clip(np.round(rng.lognormal(np.log(200.0), 0.9, n)), 1, 4096)


def _traffic(family: str, seed: int, rate: FloatArray, rng: np.random.Generator) -> Traffic:
    times = poisson_arrivals(rate * wobble(rate.size, rng), rng)
    n = times.size
    return Traffic(family, seed, times, conv_context_tokens(n, rng), generated_tokens(n, rng))


def on_off(seed: int, rng: np.random.Generator) -> Traffic:
    """Bursts of 10-60 s at a per-burst peak, separated by near-idle gaps (median 30 s)."""
    t = grid()
    rate = np.empty(t.size)
    level = 10.0
    at = float(rng.uniform(0, 30))
    rate[: int(at / BIN_S)] = 0.02 * level
    while at < DURATION_S:
        burst = float(rng.uniform(10, 60))
        gap = float(np.clip(rng.lognormal(np.log(30.0), 0.8), 3, 300))
        peak = level * float(np.clip(rng.lognormal(0.0, 0.35), 0.5, 1.6))
        lo, mid, hi = (int(x / BIN_S) for x in (at, at + burst, at + burst + gap))
        rate[lo:mid] = peak
        rate[mid:hi] = 0.02 * level
        at += burst + gap
    # A burst's onset and end take ~1 s, not one bin.
    rate = np.convolve(rate, np.ones(10) / 10, mode="same")
    return _traffic("on-off", seed, rate, rng)


def flash_crowd(seed: int, rng: np.random.Generator) -> Traffic:
    """A steady load that jumps 4x within 20 s, holds 5 min and decays, twice an hour."""
    t = grid()
    rate = 4.0 * (1 + 0.15 * np.sin(2 * np.pi * (t / 1800 + rng.random())))
    first = float(rng.uniform(300, 900))
    second = float(rng.uniform(first + 900, DURATION_S - 600))
    for start in (first, second):
        decay = float(rng.uniform(30, 120))
        up = np.clip((t - start) / 20, 0, 1)
        down = np.clip((t - start - 320) / decay, 0, 1)
        rate *= 1 + 3 * up * (1 - down)
    return _traffic("flash-crowd", seed, rate, rng)


def diurnal(seed: int, rng: np.random.Generator) -> Traffic:
    """A day compressed into an hour: night trough, morning peak, lunch dip, evening peak."""
    hours = grid() / DURATION_S * 24
    morning = float(rng.uniform(9.5, 12))
    evening = float(rng.uniform(18.5, 21))
    shape = (
        0.3
        + 1.2 * np.exp(-(((hours - morning) / 3.0) ** 2))
        + float(rng.uniform(0.8, 1.2)) * np.exp(-(((hours - evening) / 2.5) ** 2))
        - 0.25 * np.exp(-(((hours - 13.0) / 0.8) ** 2))
    )
    rate = 5.5 * shape / float(np.mean(shape))
    return _traffic("diurnal", seed, rate, rng)


def sawtooth(seed: int, rng: np.random.Generator) -> Traffic:
    """Ramps from the base to 3x over 90 s, then a sharp drop and 20-120 s at the base."""
    t = grid()
    base = 4.0
    rate = np.full(t.size, base)
    at = float(rng.uniform(20, 120))
    while at < DURATION_S:
        lo, hi = int(at / BIN_S), int(min(at + 90, DURATION_S) / BIN_S)
        rate[lo:hi] = base * (1 + 2 * (t[lo:hi] - at) / 90)
        at += 90 + float(rng.uniform(20, 120))
    return _traffic("sawtooth", seed, rate, rng)


def long_context(seed: int, rng: np.random.Generator) -> Traffic:
    """Steady arrivals whose share of long prompts (median 2500 vs 150 tokens) shifts 10-70 %."""
    t = grid()
    rate = np.full(t.size, 6.0)
    share = np.full(t.size, 0.1)
    at, current = float(rng.uniform(120, 400)), 0.1
    while at < DURATION_S:
        target = float(rng.choice([0.1, 0.3, 0.5, 0.7]))
        ramp = float(rng.uniform(10, 60))
        blend = np.clip((t - at) / ramp, 0, 1)
        after = t >= at
        share[after] = current + (target - current) * blend[after]
        current = target
        at += float(rng.uniform(240, 600))
    times = poisson_arrivals(rate * wobble(rate.size, rng), rng)
    n = times.size
    long = rng.random(n) < share[np.minimum((times / BIN_S).astype(np.int64), t.size - 1)]
    context = np.where(
        long,
        np.clip(np.round(rng.lognormal(np.log(2500.0), 0.4, n)), 513, 8192),
        np.clip(np.round(rng.lognormal(np.log(150.0), 0.5, n)), 1, 512),
    )
    return Traffic("long-context", seed, times, context, generated_tokens(n, rng))


FAMILIES: dict[str, Callable[[int, np.random.Generator], Traffic]] = {
    "on-off": on_off,
    "flash-crowd": flash_crowd,
    "diurnal": diurnal,
    "sawtooth": sawtooth,
    "long-context": long_context,
}
"""Every traffic family by its CLI name."""


def generate(family: str, seed: int) -> Traffic:
    """One seeded instance of a family (same family and seed, same requests)."""
    try:
        build = FAMILIES[family]
    except KeyError:
        choices = sorted(FAMILIES)
        raise WorkloadError(f"unknown family {family!r}; choose one of {choices}") from None
    return build(seed, np.random.default_rng(seed))


def _stamp(seconds: float) -> str:
    """`2024-01-01 00:00:12.3456789`: the trace's form, 7 fractional digits."""
    whole = int(seconds)
    frac = round((seconds - whole) * 10**7)
    if frac == 10**7:
        whole, frac = whole + 1, 0
    day = (_EPOCH + dt.timedelta(seconds=whole)).strftime("%Y-%m-%d %H:%M:%S")
    return f"{day}.{frac:07d}"


def write_csv(traffic: Traffic, path: Path) -> None:
    """Write `TIMESTAMP,ContextTokens,GeneratedTokens`, one request a line, oldest first."""
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    lines.extend(
        f"{_stamp(float(s))},{int(c)},{int(g)}"
        for s, c, g in zip(
            traffic.times, traffic.context_tokens, traffic.generated_tokens, strict=True
        )
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")

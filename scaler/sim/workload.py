"""Arrivals for the simulator: per-tier timestamps and work units, from a trace or a scenario."""

from __future__ import annotations

import csv
import datetime as dt
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from schemas.errors import InferbusError
from schemas.topics import Tier

FloatArray = npt.NDArray[np.float64]


class WorkloadError(InferbusError):
    """A trace file or scenario request the simulator cannot use."""


@dataclass(frozen=True)
class TierArrivals:
    """Sorted arrival times (s from start) and each request's input length in tokens."""

    times: FloatArray
    tokens: FloatArray

    def __post_init__(self) -> None:
        if self.times.shape != self.tokens.shape:
            raise WorkloadError("times and tokens differ in length")
        if self.times.size and np.any(np.diff(self.times) < 0):
            raise WorkloadError("arrival times must be sorted")


@dataclass(frozen=True)
class Phase:
    """A named stretch of a scenario (e.g. a ramp) that the report looks at on its own."""

    name: str
    start_s: float
    end_s: float


@dataclass(frozen=True)
class Workload:
    """What arrives, per tier, over `duration_s`; `source` says where it came from."""

    name: str
    source: str
    duration_s: float
    tiers: Mapping[Tier, TierArrivals]
    phases: tuple[Phase, ...] = ()
    overrides: Mapping[str, float] = field(default_factory=dict)
    """Simulation settings this scenario is about (e.g. a long time-to-ready for `warmup`)."""

    def total(self) -> int:
        """Requests over all tiers."""
        return sum(int(a.times.size) for a in self.tiers.values())


def _parse_time(text: str) -> tuple[float, bool]:
    """Epoch seconds of an ISO date and time (UTC unless it names its offset), and whether
    it names one."""
    # The Azure trace has 7 fractional digits; datetime takes at most 6.
    head, _, rest = text.strip().partition(".")
    if "T" not in head and " " not in head:
        raise ValueError("a date without a time of day")
    digits = "".join(itertools.takewhile(str.isdigit, rest))
    zone = rest[len(digits) :]
    fraction = f".{(digits + '000000')[:6]}" if digits else ""
    stamp = dt.datetime.fromisoformat(head + fraction + zone)
    zoned = stamp.tzinfo is not None
    if not zoned:
        stamp = stamp.replace(tzinfo=dt.UTC)
    return stamp.timestamp(), zoned


def _parse_row(
    row: Mapping[str, str | None], path: Path, *, line: int
) -> tuple[float, float, bool]:
    """(epoch s, context tokens, whether the time names its zone) of one CSV row, or a
    WorkloadError naming the line."""
    stamp, count = row.get("TIMESTAMP"), row.get("ContextTokens")
    if stamp is None or count is None:
        raise WorkloadError(f"{path}:{line}: the row has fewer fields than the header")
    try:
        t, zoned = _parse_time(stamp)
    except ValueError:
        raise WorkloadError(
            f"{path}:{line}: TIMESTAMP {stamp!r} is not an ISO date and time "
            "(like 2023-11-16 18:15:46.6805900)"
        ) from None
    try:
        if "_" in count:  # float() reads "1_000" as 1000: no CSV writer means that
            raise ValueError(count)
        tokens = float(count)
    except ValueError:
        raise WorkloadError(f"{path}:{line}: ContextTokens {count!r} is not a number") from None
    if not math.isfinite(tokens) or tokens < 0:
        raise WorkloadError(f"{path}:{line}: ContextTokens {count!r} must be a count >= 0")
    return t, tokens, zoned


def read_trace(path: Path) -> tuple[FloatArray, FloatArray]:
    """Read `TIMESTAMP,ContextTokens,GeneratedTokens`; times from 0 s, context tokens."""
    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:
            reader = csv.DictReader(handle)
            # The reader's line, not the row's index: blank lines are skipped.
            rows = [(reader.line_num, row) for row in reader]
            names = list(reader.fieldnames or ())
            header = set(names)
    except OSError as exc:
        raise WorkloadError(f"cannot read {path}: {exc.strerror}") from exc
    except UnicodeDecodeError:
        raise WorkloadError(f"{path} is not UTF-8 text (a CSV trace expected)") from None
    except csv.Error as exc:
        raise WorkloadError(f"{path}: not a CSV row after line {reader.line_num}: {exc}") from None
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise WorkloadError(f"{path}: the header names {', '.join(repeated)} more than once")
    if not {"TIMESTAMP", "ContextTokens"} <= header:
        found = ",".join(names)[:200] or "nothing"
        raise WorkloadError(
            f"{path}: need a header with TIMESTAMP and ContextTokens (comma-separated, "
            f"in these cases); found {found!r}"
        )
    if not rows:
        raise WorkloadError(f"{path}: no requests after the header")
    times = np.empty(len(rows), dtype=np.float64)
    tokens = np.empty(len(rows), dtype=np.float64)
    first_of: dict[bool, int] = {}
    for index, (line, row) in enumerate(rows):
        times[index], tokens[index], zoned = _parse_row(row, path, line=line)
        first_of.setdefault(zoned, line)
    if len(first_of) == 2:
        # Read as UTC, the times without a zone land hours from those with one.
        raise WorkloadError(
            f"{path}: line {first_of[True]}'s TIMESTAMP names a time zone and line "
            f"{first_of[False]}'s does not: give every row a zone, or none (UTC)"
        )
    order = np.argsort(times, kind="stable")
    times, tokens = times[order], tokens[order]
    if times[-1] == times[0]:
        what = "one request only" if times.size == 1 else "every request has the same TIMESTAMP"
        raise WorkloadError(f"{path}: {what} (a trace needs a span)")
    return times - times[0], tokens


MAX_REQUESTS = 50_000_000
"""The most requests a scaled trace may have (the Azure trace at x30 has 581 k): a rate
scale far beyond it is a typo that would exhaust memory before it said anything."""


def scale_rate(
    times: FloatArray, tokens: FloatArray, rate_scale: float, rng: np.random.Generator
) -> tuple[FloatArray, FloatArray]:
    """Multiply the arrival rate but keep its shape: each request becomes ~rate_scale copies.

    Copies land uniformly in the gap to the next original request, so the rate over any
    window longer than a few gaps scales by `rate_scale` and no burst is invented.
    """
    if not math.isfinite(rate_scale) or rate_scale <= 0:
        raise WorkloadError(f"rate_scale must be a finite number > 0, got {rate_scale!r}")
    n = times.size
    if n * rate_scale > MAX_REQUESTS:
        raise WorkloadError(
            f"rate_scale {rate_scale:g} makes ~{n * rate_scale:.3g} requests of {n}; "
            f"the simulator takes at most {MAX_REQUESTS:.3g}"
        )
    whole = int(rate_scale)
    copies = whole + (rng.random(n) < rate_scale - whole).astype(np.int64)
    gaps = np.diff(times, append=times[-1] + (np.mean(np.diff(times)) if n > 1 else 1.0))
    idx = np.repeat(np.arange(n), copies)
    new_times = times[idx] + rng.random(idx.size) * gaps[idx]
    order = np.argsort(new_times, kind="stable")
    return new_times[order], tokens[idx][order]


def split_tiers(
    times: FloatArray, tokens: FloatArray, tiers: Sequence[Tier], rng: np.random.Generator
) -> dict[Tier, TierArrivals]:
    """Assign each request to one of `tiers` uniformly at random (seeded)."""
    twice = sorted({t for t in tiers if list(tiers).count(t) > 1})
    if twice:
        # A tier named twice would keep only its last share: half the requests gone.
        raise WorkloadError(f"tiers {list(tiers)} name {twice} more than once")
    if len(tiers) == 1:
        return {tiers[0]: TierArrivals(times, tokens)}
    pick = rng.integers(0, len(tiers), times.size)
    return {t: TierArrivals(times[pick == i], tokens[pick == i]) for i, t in enumerate(tiers)}


def from_trace(
    path: Path,
    *,
    rate_scale: float,
    tiers: Sequence[Tier],
    max_input_tokens: int,
    seed: int,
) -> Workload:
    """A workload replaying a trace CSV; context tokens become input lengths (truncated)."""
    rng = np.random.default_rng(seed)
    times, tokens = read_trace(path)
    if rate_scale != 1.0:
        # At x1 the trace is replayed as it is (a recorded run's very arrivals).
        times, tokens = scale_rate(times, tokens, rate_scale, rng)
        if times.size == 0:
            raise WorkloadError(f"{path}: no requests after scaling the rate by {rate_scale:g}")
    tokens = np.clip(tokens, 1, max_input_tokens)
    split = split_tiers(times, tokens, tiers, rng)
    empty = [t for t, arrivals in split.items() if arrivals.times.size == 0]
    if empty:
        raise WorkloadError(
            f"{path}: no requests for tier(s) {empty} after scaling the rate by "
            f"{rate_scale:g} and spreading {times.size} over {len(tiers)} tiers"
        )
    return Workload(
        name=path.stem,
        source=f"trace {path.name} x{rate_scale:g}",
        duration_s=float(times[-1]) if times.size else 0.0,
        tiers=split,
    )

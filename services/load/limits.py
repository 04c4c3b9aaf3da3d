"""What a load run accepts: finite numbers in range, and a bounded number of requests.

`value <= 0` lets NaN through (every comparison with it is false) and infinity too, and
either only fails later, as a traceback or an allocation of gigabytes; these checks say so
first, naming the flag.
"""

from __future__ import annotations

import math

from scaler.sim.workload import WorkloadError

MAX_RUN_REQUESTS = 1_000_000
"""The most requests one run may schedule. Each costs a schedule row, a ledger entry and
its samples in the report (about half a kilobyte in all); a run far past this on one
machine is a typo (`--rate 1e9`) that would exhaust memory before it sent anything."""

MAX_RUN_DURATION_S = 86_400.0
"""The longest run, seconds (a day): rates are sampled every 0.1 s over the whole run."""


def positive(flag: str, value: float, unit: str = "") -> float:
    """`value` when it is a finite number > 0; else WorkloadError naming `flag`."""
    if not math.isfinite(value) or value <= 0:
        raise WorkloadError(f"{flag} must be a finite number > 0{unit}, not {value:g}")
    return value


def non_negative(flag: str, value: float, unit: str = "") -> float:
    """`value` when it is a finite number >= 0; else WorkloadError naming `flag`."""
    if not math.isfinite(value) or value < 0:
        raise WorkloadError(f"{flag} must be a finite number >= 0{unit}, not {value:g}")
    return value


def duration(flag: str, value: float) -> float:
    """A run length: finite, > 0 and at most `MAX_RUN_DURATION_S`."""
    positive(flag, value, " seconds")
    if value > MAX_RUN_DURATION_S:
        raise WorkloadError(
            f"{flag} {value:g} s is longer than a load run may be ({MAX_RUN_DURATION_S:,.0f} s)"
        )
    return value


def within_request_cap(expected: float) -> None:
    """Refuse a workload of about `expected` requests when that is over `MAX_RUN_REQUESTS`
    (checked before the arrivals are drawn, so a typo costs no memory)."""
    if not expected <= MAX_RUN_REQUESTS:  # NaN too
        raise WorkloadError(
            f"this run would send about {expected:,.0f} requests; a load run sends at most "
            f"{MAX_RUN_REQUESTS:,} (services.load.limits.MAX_RUN_REQUESTS): lower --rate, "
            "--rate-scale or --duration, or split the run"
        )

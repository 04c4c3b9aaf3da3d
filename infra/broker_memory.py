"""What the embedded broker holds in memory, and when to say so.

Tansu's memory storage keeps every record it is sent: it enforces no `retention.ms` or
`retention.bytes` and answers no DeleteRecords (measured on Tansu 0.6, docs/operations.md).
A long `inferbus up` under traffic therefore grows until the machine runs out of memory.
`up` reads the broker's resident memory (`infra.processes.process_rss_bytes`) and warns as
it crosses shares of what the machine has left for it, with the growth rate and the
remedies.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

WARN_SHARES = (0.25, 0.5, 0.75)
"""Shares of the memory the broker could have (its own plus what is available) at which
`up` warns, each once."""

MIN_WARN_BYTES = 256 * 2**20
"""Below this the broker is not what fills the machine: no warning, whatever the share."""

GROWTH_WINDOW_S = 600.0
"""The growth rate is read over this much of the latest samples."""


@dataclass(frozen=True)
class MemorySample:
    """The broker's resident memory at a moment (monotonic seconds)."""

    t_s: float
    rss_bytes: int


def available_bytes(proc: Path = Path("/proc")) -> int | None:
    """The machine's `MemAvailable`, or None when it cannot be read."""
    try:
        for line in (proc / "meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def growth_per_minute(samples: Sequence[MemorySample]) -> float | None:
    """Bytes a minute from the first to the last sample; None under a minute of samples."""
    if len(samples) < 2:
        return None
    first, last = samples[0], samples[-1]
    span = last.t_s - first.t_s
    if span < 60.0:
        return None
    return (last.rss_bytes - first.rss_bytes) / span * 60.0


def size(n_bytes: float) -> str:
    """1.2 GB, 340 MB: what a person reads in a warning."""
    if n_bytes >= 2**30:
        return f"{n_bytes / 2**30:.1f} GB"
    return f"{n_bytes / 2**20:.0f} MB"


def memory_warning(
    rss_bytes: int,
    available: int,
    warned_share: float,
    growth_bytes_per_min: float | None,
) -> tuple[str | None, float]:
    """The warning to give now, if the broker crossed a share of `WARN_SHARES` above the one
    already warned of (and holds at least `MIN_WARN_BYTES`: a small broker on a machine that
    others filled is not the cause), and the share warned of after it. Pure: the caller
    reads and says."""
    room = rss_bytes + available
    share = rss_bytes / room if room > 0 else 1.0
    crossed = [s for s in WARN_SHARES if warned_share < s <= share]
    if not crossed or rss_bytes < MIN_WARN_BYTES:
        return None, warned_share
    text = (
        f"the embedded broker holds {size(rss_bytes)} in memory, {share:.0%} of what this "
        "machine has for it: Tansu keeps every record (it has no retention)"
    )
    if growth_bytes_per_min is not None and growth_bytes_per_min > 0:
        minutes_left = available / growth_bytes_per_min
        text += (
            f"; it grows {size(growth_bytes_per_min)} a minute, so the rest lasts about "
            f"{_duration(minutes_left)} at this rate"
        )
    text += (
        ". Stop and start `inferbus up` to free it (requests still queued are lost), or run "
        "it against a Kafka with retention (--bootstrap HOST:PORT)"
    )
    return text, max(crossed)


def _duration(minutes: float) -> str:
    if minutes >= 120:
        return f"{minutes / 60:.0f} h"
    return f"{max(minutes, 1):.0f} min"

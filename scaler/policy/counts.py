"""Replica counts from rates: the ceiling, saturating where the arithmetic overflows."""

from __future__ import annotations

import math

MOST_REPLICAS = 2**53
"""What a sizing step asks for when its arithmetic overflows to infinity (an arrival rate
near 1e308/s, a throughput of 1e-310/s per replica, a time-to-ready near 1e308 s): more
than any group has, so the bounds cap it at the group's max replicas or partitions, as
they cap a very large finite count."""


def ceil_count(x: float) -> int:
    """`math.ceil(x)`, except that +inf is `MOST_REPLICAS`; NaN still raises ValueError
    (a count computed from nothing is a defect, not a size)."""
    if x == math.inf:
        return MOST_REPLICAS
    return math.ceil(x)

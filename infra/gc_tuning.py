"""Garbage collection for the long-running services (ingest, workers, the scaler, `up`).

CPython collects its youngest generation after every 700 net allocations of container
objects, and each collection of an older generation walks every object the process has
made since it started: the modules, aiokafka's protocol classes, pydantic's schemas and
validators. A service allocates a few dozen containers per request and keeps almost
none, so at thousands of requests a second most collections find nothing.

`tune_for_service`, called before a service's event loop starts, moves everything alive
then (the imported code and its tables; what the service builds afterwards stays
collectable) into the permanent generation (`gc.freeze`), where no collection looks again,
and collects the youngest generation every 10,000 allocations instead of 700. Measured on
the null-engine bus ceiling (docs/benchmarks.md, stop 35): ingest's CPU a request fell
11-16 %, the worker's 2-7 %. Clients (`inferbus infer`, the Python client, the benchmarks'
load generators) keep CPython's defaults: their process is not ours to tune.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 10_000
"""Net container allocations between collections of the youngest generation (CPython: 700)."""
MIDDLE_EVERY = 10
"""Young collections between collections of the middle generation (CPython: 10)."""
OLD_EVERY = 2
"""Middle collections between collections of the oldest generation (CPython: 10).

The thresholds count net new objects, and under a long overload that growth is garbage:
requests live for seconds, their reference cycles are promoted past the young collections
before they die, and only a collection of the oldest generation reaches them. At 20 and
100 that took 20M net objects, and an overloaded ingest grew by hundreds of MB of
unreachable cycles (docs/reliability.md, stop 47); every 200,000 bounds them. After the
freeze a full collection walks only what the service built since, so it stays cheap."""


def tune_for_service() -> None:
    """Freeze what is alive now and collect less often."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, MIDDLE_EVERY, OLD_EVERY)

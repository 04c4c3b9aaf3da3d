"""Partition shares: no member may get more of the load than it can serve.

A member owns whole partitions (`infra.assignment`): n consumers of P partitions leave
some with ⌈P/n⌉, and each of those carries ⌈P/n⌉/P of the load however many others there
are (5 consumers of 12 partitions: two carry 3/12, 1.25× the mean). Sizing for the mean
can therefore leave the busiest members over capacity while the group looks fine on
average: their queues grow and every request of their partitions misses. So the count is
raised, where needed, to the fewest consumers whose busiest member runs at most at
`busiest_max_utilization` for the arrivals measured now.

Only that: rounding every count to one that changes the busiest member's share costs
1.37× the oracle in the simulator (against 1.19×), and rounding down to the fewest with
the same share loses a third of the attainment (the members with fewer partitions carry
real load: each consumer added moves some of it off the busiest).
"""

from __future__ import annotations

import math

from scaler.config import PolicyConfig
from scaler.decision import Reason, reason_number, reason_percent
from scaler.policy.guards import group_cap
from scaler.policy.plan import Plan, direction
from scaler.signals import GroupSignals


def busiest_share(replicas: int, partitions: int) -> int:
    """Partitions the busiest of `replicas` consumers owns."""
    return math.ceil(partitions / replicas)


def busiest_utilization(busy: float, replicas: int, partitions: int) -> float:
    """Utilization of the busiest member when `busy` replicas' worth of work is spread evenly
    over the partitions."""
    return busy * busiest_share(replicas, partitions) / partitions


def stable_count(desired: int, busy: float, partitions: int, most: float, cap: int) -> int:
    """The fewest consumers ≥ `desired` (at most `cap`) whose busiest member runs ≤ `most`.

    The busiest share never grows with the count, so a bisection finds what counting up one
    by one would, also where `cap` is a topic's billions of partitions."""

    def over(count: int) -> bool:
        return busiest_utilization(busy, count, partitions) > most

    if desired >= cap or not over(desired):
        return desired
    low, high = desired, cap  # over(low); the answer is in (low, high]
    while high - low > 1:
        middle = (low + high) // 2
        if over(middle):
            low = middle
        else:
            high = middle
    return high


def shares_count(count: int, busy: float, signals: GroupSignals, most: float | None) -> int:
    """`count` raised until its busiest member runs at most `most` busy with `busy`
    replicas' worth of work spread over the partitions (None: `count` as it is)."""
    if most is None or count <= 0 or busy <= 0:
        return count
    return stable_count(count, busy, signals.partitions, most, group_cap(signals))


def even_shares(plan: Plan, config: PolicyConfig) -> Plan:
    """Raise `desired` until no member carries more than it can serve (see module)."""
    s = plan.signals
    most = config.busiest_max_utilization
    lam, mu = s.arrival_rps, s.service_rps_per_replica
    if most is None or plan.desired <= 0 or not lam or not mu or plan.diagnosis == "engine_bound":
        return plan
    busy = lam / mu
    raised = shares_count(plan.desired, busy, s, most)
    if raised == plan.desired:
        return plan
    before = busiest_utilization(busy, plan.desired, s.partitions)
    after = busiest_utilization(busy, raised, s.partitions)
    return plan.with_(
        desired=raised,
        diagnosis=direction(raised, plan.current),
        reason=Reason(
            "partition_shares",
            f"{reason_number(plan.desired)} consumers of {reason_number(s.partitions)} partitions "
            f"leave the busiest with {busiest_share(plan.desired, s.partitions)}, "
            f"{reason_percent(before)} busy at {reason_number(lam)}/s: "
            f"{reason_number(raised)} ({busiest_share(raised, s.partitions)}, "
            f"{reason_percent(after)})",
            {
                "wanted": plan.desired,
                "partitions": s.partitions,
                "busiest_utilization": before,
                "raised_busiest_utilization": after,
            },
        ),
    )

"""The per-group gauges the scaler exports for the dashboard, and what the scaler sets in them."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from scaler.collector.collector import GroupCollection
from scaler.decision import GroupDecision
from scaler.service import ScalerService
from tests.unit.scaler.conftest import make_signals
from tracing import metrics
from tracing.metrics import REGISTRY


def value(name: str, **labels: str) -> float | None:
    found = REGISTRY.get_sample_value(name, labels)
    return None if found is None else float(found)


def test_rates_and_latencies_are_exported_in_seconds_and_unmeasured_is_nan() -> None:
    group = "inferbus.workers.gm.batch"
    metrics.set_group_rates(group, 120.0, None)
    metrics.set_oldest_age(group, 250.0)
    metrics.set_group_p99(group, "queue", None)
    metrics.set_slo(group, 500.0)
    assert value("inferbus_arrival_rps", group=group) == 120.0
    assert math.isnan(value("inferbus_service_rps", group=group) or 0.0)
    assert value("inferbus_oldest_age_seconds", group=group) == 0.25
    assert math.isnan(value("inferbus_group_p99_seconds", group=group, part="queue") or 0.0)
    assert value("inferbus_slo_p99_e2e_seconds", group=group) == 0.5


@pytest.mark.parametrize(
    ("current", "desired", "direction"),
    [pytest.param(2, 5, "up", id="up"), pytest.param(5, 2, "down", id="down")],
)
def test_a_scale_decision_is_marked_at_its_time(current: int, desired: int, direction: str) -> None:
    group = f"inferbus.workers.mark-{direction}.interactive"
    metrics.mark_scale_decision(group, current, desired, "capacity_bound", 1_700_000_000.5)
    assert (
        value(
            "inferbus_scaler_decision_timestamp_seconds",
            group=group,
            direction=direction,
            diagnosis="capacity_bound",
        )
        == 1_700_000_000.5
    )


def test_a_hold_is_not_marked() -> None:
    group = "inferbus.workers.hold.interactive"
    metrics.mark_scale_decision(group, 3, 3, "steady", 1.0)
    marked = [
        s
        for family in REGISTRY.collect()
        for s in family.samples
        if s.name == "inferbus_scaler_decision_timestamp_seconds" and s.labels["group"] == group
    ]
    assert marked == []


def test_the_scaler_exports_a_tick_of_signals_and_its_decision() -> None:
    signals = make_signals(group="inferbus.workers.exp.interactive", model="exp")
    decision = GroupDecision(
        group=signals.group, model="exp", tier="interactive", current=4, desired=6,
        diagnosis="capacity_bound",
    )  # fmt: skip
    ScalerService._export(GroupCollection(signals.group, signals, 0), decision)
    group = signals.group
    assert value("inferbus_group_lag_messages", group=group) == 10
    assert value("inferbus_oldest_age_seconds", group=group) == 0.02
    assert value("inferbus_slo_p99_e2e_seconds", group=group) == 0.5
    assert value("inferbus_group_p99_seconds", group=group, part="queue") == 0.02
    assert value("inferbus_group_p99_seconds", group=group, part="engine") == 0.15
    assert value("inferbus_group_p99_seconds", group=group, part="e2e") == 0.18
    assert value("inferbus_replicas_desired", group=group) == 6
    stamp = value(
        "inferbus_scaler_decision_timestamp_seconds",
        group=group,
        direction="up",
        diagnosis="capacity_bound",
    )
    assert stamp is not None and stamp > 1_600_000_000


def test_the_replica_states_exported_are_the_ones_docs_metrics_lists() -> None:
    """Regression: docs/metrics.md listed loading, warming, ready and draining; the scaler
    exports ready and starting."""
    signals = make_signals(group="inferbus.workers.states.interactive", model="states")
    ScalerService._export(GroupCollection(signals.group, signals, 0), None)
    exported = {
        s.labels["state"]
        for family in REGISTRY.collect()
        for s in family.samples
        if s.name == "inferbus_replicas" and s.labels["group"] == signals.group
    }
    docs = Path(__file__).parents[3] / "docs" / "metrics.md"
    row = next(
        line for line in docs.read_text().splitlines() if line.startswith("| `inferbus_replicas` |")
    )
    what = row.split("|")[4]
    assert set(re.findall(r"`([a-z_]+)`", what)) == exported == {"ready", "starting"}

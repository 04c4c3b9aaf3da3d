"""Extreme finite inputs: counts that overflow are capped, reasons stay short, `decide` never
shows a traceback."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from scaler import cli
from scaler.config import PolicyConfig
from scaler.decision import reason_number, reason_percent
from scaler.policy import POLICIES
from scaler.policy.counts import MOST_REPLICAS, ceil_count
from scaler.policy.shares import busiest_utilization, stable_count
from scaler.signals import GroupState, ScalerState
from scaler.snapshot import signals_to_dict
from tests.unit.scaler.conftest import make_signals


@pytest.mark.parametrize(
    ("x", "count"),
    [
        pytest.param(3.2, 4, id="fraction-up"),
        pytest.param(4.0, 4, id="whole"),
        pytest.param(-0.5, 0, id="small-negative"),
        pytest.param(1e300, math.ceil(1e300), id="huge-finite-unchanged"),
        pytest.param(math.inf, MOST_REPLICAS, id="inf-saturates"),
    ],
)
def test_ceil_count(x: float, count: int) -> None:
    assert ceil_count(x) == count


def test_ceil_count_refuses_nan() -> None:
    with pytest.raises(ValueError, match="NaN"):
        ceil_count(math.nan)


_HISTORY = tuple((-60.0 + 5 * k, 1100.0 + 4 * k) for k in range(12))


@pytest.mark.parametrize("policy", sorted(POLICIES))
@pytest.mark.parametrize(
    ("change", "history"),
    [
        pytest.param({"time_to_ready_s": 1.7e308}, _HISTORY, id="ttr-max"),
        pytest.param({"service_rps_per_replica": 1e-310}, (), id="tiny-throughput"),
        pytest.param({"service_rps_per_replica": 1e-310}, _HISTORY, id="tiny-throughput-hist"),
        pytest.param({"arrival_rps": 1.7e308}, (), id="arrival-max"),
        pytest.param({"arrival_rps": 1.7e308}, _HISTORY, id="arrival-max-hist"),
        pytest.param({}, tuple((t, 1e300) for t, _ in _HISTORY), id="history-1e300"),
        pytest.param({"lag": int(1.7e308)}, (), id="lag-max"),
        pytest.param({"partitions": int(1e300), "arrival_rps": 1e300}, (), id="partitions-1e300"),
    ],
)
def test_extreme_values_are_capped_not_raised(
    policy: str, change: dict[str, Any], history: tuple[tuple[float, float], ...]
) -> None:
    s = make_signals(max_replicas=12, **change)
    state = ScalerState((GroupState(group=s.group, arrival_samples=history),))
    decision, _ = POLICIES[policy]([s], state, PolicyConfig(), 0.0)
    group = decision.groups[0]
    assert 1 <= group.desired <= 12
    assert len(group.line()) < 1000  # no number printed in hundreds of digits


@pytest.mark.parametrize(
    "config",
    [
        pytest.param(PolicyConfig(target_utilization=1e-310, utilization_band=0.0), id="tiny-u"),
        pytest.param(PolicyConfig(default_time_to_ready_s=1e308), id="default-ttr"),
        pytest.param(PolicyConfig(scale_up_min_step_share=1e308), id="step-share"),
        pytest.param(PolicyConfig(keda_lag_threshold=1e-310), id="lag-threshold"),
    ],
)
@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_extreme_configs_are_capped_not_raised(policy: str, config: PolicyConfig) -> None:
    s = make_signals(max_replicas=12, time_to_ready_s=None)
    decision, _ = POLICIES[policy]([s], ScalerState(), config, 0.0)
    assert 1 <= decision.groups[0].desired <= 12


@pytest.mark.parametrize(
    ("desired", "busy", "partitions", "most", "cap"),
    [
        pytest.param(desired, busy, partitions, 0.8, cap, id=f"{desired}-{busy}-{partitions}-{cap}")
        for desired in (1, 3, 5, 7)
        for busy in (0.5, 2.4, 4.0, 9.5, 30.0)
        for partitions in (12, 32, 33)
        for cap in (8, 12, 40)
    ],
)
def test_stable_count_bisects_to_what_counting_up_finds(
    desired: int, busy: float, partitions: int, most: float, cap: int
) -> None:
    count = desired
    while count < cap and busiest_utilization(busy, count, partitions) > most:
        count += 1
    assert stable_count(desired, busy, partitions, most, cap) == count


def test_stable_count_is_quick_on_a_huge_topic() -> None:
    assert stable_count(1, math.inf, 10**300, 0.8, 10**300) == 10**300


def test_hold_of_zero_seconds_scales_down() -> None:
    """A time-to-ready of 0 makes the SLO policy's hold 0 s: it holds nothing (it raised)."""
    config = PolicyConfig()
    state = ScalerState()
    for now in range(0, 100, 5):
        s = make_signals(
            collected_at=float(now), time_to_ready_s=0.0, replicas=8, ready_replicas=8, lag=0
        )
        decision, state = POLICIES["slo"]([s], state, config, float(now))
    assert decision.groups[0].desired < 8


@pytest.mark.parametrize(
    ("x", "decimals", "text"),
    [
        pytest.param(1151.4, 0, "1151", id="documented-rate"),
        pytest.param(2400, 0, "2400", id="int"),
        pytest.param(4.0, 1, "4.0", id="one-decimal"),
        pytest.param(999_999_999.0, 0, "999999999", id="below-1e9"),
        pytest.param(1e12, 0, "1e+12", id="large"),
        pytest.param(1.7e308, 1, "1.7e+308", id="max"),
        pytest.param(math.inf, 0, "inf", id="inf"),
        pytest.param(2**1100, 0, "more than 1.8e+308", id="int-beyond-float"),
    ],
)
def test_reason_number(x: float, decimals: int, text: str) -> None:
    assert reason_number(x, decimals) == text


@pytest.mark.parametrize(
    ("share", "text"),
    [pytest.param(0.85, "85%", id="plain"), pytest.param(1e300, "1e+302%", id="huge")],
)
def test_reason_percent(share: float, text: str) -> None:
    assert reason_percent(share) == text


def _decide(tmp_path: Path, *args: str, **change: Any) -> Any:
    path = tmp_path / "s.json"
    path.write_text(json.dumps(signals_to_dict(make_signals(**change))))
    return CliRunner().invoke(cli.scaler_app, ["decide", "--signals", str(path), *args])


def test_decide_on_extreme_snapshot_exits_cleanly(tmp_path: Path) -> None:
    result = _decide(tmp_path, service_rps_per_replica=1e-310, max_replicas=12)
    assert result.exit_code == 0, result.output
    assert '"desired": 12' in result.output


def test_decide_prints_json_a_reader_takes_when_numbers_overflow(tmp_path: Path) -> None:
    """1e308 arrivals on a 1e-10/s replica: `Infinity` busy replicas, which is not JSON."""
    result = _decide(tmp_path, arrival_rps=1e308, service_rps_per_replica=1e-10)
    assert result.exit_code == 0, result.output
    decoded = json.loads(result.stdout)
    assert decoded["desired"] >= 1
    assert "Infinity" not in result.stdout


def test_decide_prints_one_json_line_per_group(tmp_path: Path) -> None:
    """Two groups: two lines, each a JSON object (indented objects back to back were not
    one JSON document and not JSON Lines either)."""
    groups = [
        signals_to_dict(make_signals(group=f"inferbus.workers.m.{tier}", tier=tier))
        for tier in ("interactive", "batch")
    ]
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"now": 0.0, "groups": groups}))
    result = CliRunner().invoke(cli.scaler_app, ["decide", "--signals", str(path)])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert [json.loads(line)["group"] for line in lines] == [
        "inferbus.workers.m.interactive",
        "inferbus.workers.m.batch",
    ]


def test_decide_reports_a_policy_failure_as_a_defect(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*_: Any) -> Any:
        raise ZeroDivisionError("float division by zero")

    monkeypatch.setitem(POLICIES, "slo", broken)
    result = _decide(tmp_path)
    assert result.exit_code == 2
    assert "error: the slo policy failed on" in result.output
    assert "ZeroDivisionError: float division by zero" in result.output
    assert "defect in inferbus" in result.output
    assert "Traceback" not in result.output


def test_decide_keeps_unknown_reasons_numbers(tmp_path: Path) -> None:
    result = _decide(tmp_path, "--policy", "keda-lag", lag=None)
    assert result.exit_code == 0, result.output
    reason = json.loads(result.output)["reasons"][0]
    assert reason["code"] == "lag_unknown"
    assert reason["numbers"] == {
        "replicas": 4,
        "ready_replicas": 4,
        "starting_replicas": 0,
        "arrival_rps": 840.0,
        "service_rps_per_replica": 300.0,
        "utilization": 0.7,
    }

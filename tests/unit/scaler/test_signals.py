"""Snapshot (de)serialization and config validation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from scaler.config import PolicyConfig, config_from_dict
from scaler.signals import SignalsError
from scaler.snapshot import load_snapshot, signals_from_dict, signals_to_dict
from tests.unit.scaler.conftest import make_signals


def test_round_trip() -> None:
    s = make_signals()
    assert signals_from_dict(json.loads(json.dumps(signals_to_dict(s)))) == s


@pytest.mark.parametrize(
    ("change", "message"),
    [
        pytest.param({"replicaz": 3}, "unknown field", id="unknown-field"),
        pytest.param({"replicas": None}, "required", id="null-required"),
        pytest.param({"lag": 1.5}, "whole number", id="fractional-int"),
        pytest.param({"arrival_rps": "fast"}, "must be a number", id="wrong-type"),
        pytest.param({"tier": "gold"}, "tier", id="bad-tier"),
        pytest.param({"ready_replicas": 9}, "ready_replicas", id="more-ready-than-replicas"),
        pytest.param({"utilization": 1.7}, "utilization", id="utilization-out-of-range"),
        pytest.param({"arrival_rps": -50}, "'arrival_rps' must be >= 0", id="negative-rate"),
        pytest.param({"lag": -10}, "'lag' must be >= 0", id="negative-lag"),
        pytest.param({"engine_p99_ms": -1}, "'engine_p99_ms' must be >= 0", id="negative-p99"),
        pytest.param(
            {"time_to_ready_s": -10}, "'time_to_ready_s' must be >= 0", id="negative-ready"
        ),
    ],
)
def test_bad_snapshot_fields(change: dict[str, Any], message: str) -> None:
    raw = {**signals_to_dict(make_signals()), **change}
    with pytest.raises(SignalsError, match=message):
        signals_from_dict(raw)


def test_missing_required_field() -> None:
    raw = signals_to_dict(make_signals())
    del raw["partitions"]
    with pytest.raises(SignalsError, match="missing required field"):
        signals_from_dict(raw)


def test_snapshot_now_defaults_to_newest_collection(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps([signals_to_dict(make_signals(collected_at=77.0))]))
    snap = load_snapshot(path)
    assert snap.now == 77.0 and len(snap.signals) == 1


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param({"target_utilization": 0}, id="zero-target"),
        pytest.param({"target_utilization": 0.95, "utilization_band": 0.1}, id="band-over-1"),
        pytest.param({"forecast_min_t": -1.0}, id="negative-t"),
        pytest.param({"initial_spare_replicas": 20.0}, id="spare-above-max"),
        pytest.param({"burst_low_share": 0.6}, id="gap-line-above-burst-line"),
        pytest.param({"headroom_quantile": 0.0}, id="quantile-zero"),
        pytest.param({"failed_collections_before_fallback": 0}, id="fallback-n"),
        pytest.param({"max_total_replicas": -1}, id="budget"),
    ],
)
def test_config_cross_field_validation(raw: dict[str, Any]) -> None:
    with pytest.raises(SignalsError):
        config_from_dict(raw)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        pytest.param({"burst_schedule_intervals": -1}, "burst_schedule_intervals", id="negative"),
        pytest.param(
            {"burst_schedule_tolerance_share": 1.0}, "burst_schedule_tolerance_share", id="whole"
        ),
        pytest.param(
            {"burst_schedule_tolerance_share": -0.1}, "burst_schedule_tolerance_share", id="below"
        ),
    ],
)
def test_config_names_the_schedule_field_out_of_range(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(SignalsError, match=message):
        config_from_dict(raw)


def test_config_whole_number_of_an_int_field_is_an_int() -> None:
    """JSON's 2.0 for a count was kept a float, and the decision failed on a slice."""
    config = config_from_dict({"burst_schedule_intervals": 2.0, "burst_min_count": 3.0})
    assert isinstance(config.burst_schedule_intervals, int) and config.burst_schedule_intervals == 2
    assert isinstance(config.burst_min_count, int)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        pytest.param({"target_utilization": "high"}, "target_utilization must be a number"),
        pytest.param({"target_utilization": None}, "target_utilization cannot be null"),
        pytest.param({"initial_spare_replicas": True}, "must be a number, got True"),
    ],
)
def test_config_names_a_value_of_the_wrong_type(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(SignalsError, match=message):
        config_from_dict(raw)


def test_config_unknown_field() -> None:
    with pytest.raises(SignalsError, match="unknown config"):
        config_from_dict({"scale_down_window": 10})


def test_horizon_defaults_to_time_to_ready() -> None:
    # Time-to-ready plus half the 15 s metrics window (a window's rate is its middle's).
    assert PolicyConfig().horizon_s(make_signals(time_to_ready_s=55.0)) == 62.5
    assert PolicyConfig(forecast_horizon_s=10).horizon_s(make_signals()) == 10.0


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param({"groups": [{}, {}]}, "given more than once", id="one-group-twice"),
        pytest.param(
            {"groups": [{}], "history": {"nosuch": [[1.0, 2.0]]}},
            "history for group.s. \\['nosuch'\\] that the snapshot lacks",
            id="history-of-an-unknown-group",
        ),
        pytest.param(
            {"groups": [{"collected_at": 3000.0}], "now": 100.0},
            "is after 'now'",
            id="collected-after-now",
        ),
    ],
)
def test_bad_snapshots(tmp_path: Path, content: dict[str, Any], message: str) -> None:
    group = signals_to_dict(make_signals(collected_at=50.0))
    content["groups"] = [{**group, **change} for change in content["groups"]]
    path = tmp_path / "s.json"
    path.write_text(json.dumps(content))
    with pytest.raises(SignalsError, match=message):
        load_snapshot(path)


def test_a_snapshot_that_is_not_text(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_bytes(b"\xff\xfe{}")
    with pytest.raises(SignalsError, match="is not UTF-8 text"):
        load_snapshot(path)


def test_a_snapshot_nested_past_the_parser_s_stack_is_no_json_not_a_traceback(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.json"
    path.write_text('{"groups": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(SignalsError, match="is not valid JSON: nested deeper than this parser"):
        load_snapshot(path)

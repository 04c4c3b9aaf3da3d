"""Snapshot and config checks: history, `now`, contradictory counts, non-finite config."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from scaler.config import PolicyConfig, config_from_dict, load_config
from scaler.signals import SignalsError
from scaler.snapshot import load_snapshot, signals_from_dict, signals_to_dict
from tests.unit.scaler.conftest import make_signals

GROUP = make_signals().group


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "snapshot.json"
    path.write_text(text)
    return path


def _snapshot(history: Any = None, **top: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {"groups": [signals_to_dict(make_signals(collected_at=100.0))], **top}
    if history is not None:
        raw["history"] = {GROUP: history}
    return raw


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            json.dumps(_snapshot([[90, -5]])),
            r"sample 0 \[90, -5\]: rps must be >= 0",
            id="neg-rps",
        ),
        pytest.param(
            json.dumps(_snapshot([[80, 10], [90, float("nan")]])),
            r"sample 1 \[90, nan\]: rps must be finite",
            id="nan-rps",
        ),
        pytest.param(
            json.dumps(_snapshot([[90, float("inf")]])), "rps must be finite", id="inf-rps"
        ),
        pytest.param(json.dumps(_snapshot([[float("nan"), 1]])), "t must be finite", id="nan-t"),
        pytest.param(
            json.dumps(_snapshot([[90, 10**400]])), "characters.*rps must be finite", id="bigint"
        ),
        pytest.param(json.dumps(_snapshot([[90, "1"]])), "two numbers", id="string-rps"),
        pytest.param(json.dumps(_snapshot([[90, True]])), "two numbers", id="bool-rps"),
        pytest.param(json.dumps(_snapshot([[90]])), "two numbers", id="one-number"),
        pytest.param(json.dumps(_snapshot({"t": 1})), r"must be \[\[t, rps\]", id="not-a-list"),
        pytest.param(
            json.dumps(_snapshot([[90, 10], [101, 10]])),
            r"history of \['inferbus.workers.m.interactive'\] has samples after 'now' \(100",
            id="future-default-now",
        ),
        pytest.param(
            json.dumps(_snapshot([[150, 10]], now=120)),
            "has samples after 'now' \\(120\\)",
            id="future-given-now",
        ),
        pytest.param(
            json.dumps(_snapshot(now=float("nan"))),
            "'now' must be a finite number of seconds, got nan",
            id="now-nan",
        ),
        pytest.param(
            json.dumps(_snapshot(now=float("inf"))), "'now' must be a finite number", id="now-inf"
        ),
        pytest.param(json.dumps(_snapshot(now="100")), "'now' must be a finite", id="now-str"),
        pytest.param(
            json.dumps({"groups": [{**_snapshot()["groups"][0], "newest_ready_at": 101.0}]}),
            "newest_ready_at of .* is after their collected_at",
            id="ready-after-collection",
        ),
        pytest.param(json.dumps(_snapshot(now=True)), "'now' must be a finite", id="now-bool"),
        pytest.param(
            json.dumps(_snapshot()).replace('"replicas": ', '"replicas": 9, "replicas": ', 1),
            "'replicas' is written twice in one object",
            id="key-twice",
        ),
    ],
)
def test_snapshot_history_and_now_are_checked(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(SignalsError, match=message):
        load_snapshot(_write(tmp_path, text))


@pytest.mark.parametrize(
    ("history", "now"),
    [
        pytest.param([[40, 900], [100, 1000]], None, id="last-sample-at-now"),
        pytest.param([], 100, id="empty"),
        pytest.param([[95, 0]], 100, id="zero-rps"),
    ],
)
def test_good_history_loads(tmp_path: Path, history: list[list[float]], now: float | None) -> None:
    top = {} if now is None else {"now": now}
    snapshot = load_snapshot(_write(tmp_path, json.dumps(_snapshot(history, **top))))
    assert snapshot.state.get(GROUP).arrival_samples == tuple((t, v) for t, v in history)


def test_comment_is_a_known_top_level_field(tmp_path: Path) -> None:
    snapshot = load_snapshot(_write(tmp_path, json.dumps(_snapshot(comment="why this file"))))
    assert snapshot.now == 100.0


@pytest.mark.parametrize(
    ("change", "message"),
    [
        pytest.param(
            {"replicas": 2, "ready_replicas": 2, "starting_replicas": 10},
            r"ready_replicas 2 \+ starting_replicas 10 > replicas 2",
            id="starting-beyond-replicas",
        ),
        pytest.param(
            {"replicas": 4, "ready_replicas": 3, "starting_replicas": 2},
            r"ready_replicas 3 \+ starting_replicas 2 > replicas 4",
            id="ready-plus-starting",
        ),
        pytest.param(
            {"warm_replicas": 20, "max_replicas": 3},
            "warm_replicas 20 > max_replicas 3",
            id="warm-beyond-max",
        ),
        pytest.param({"lag": 10**400}, "'lag' must be finite.*characters", id="lag-beyond-float"),
        pytest.param({"arrival_rps": float("nan")}, "'arrival_rps' must be finite", id="nan"),
        pytest.param({"model": ""}, "'model' must be a non-empty string", id="empty-model"),
        pytest.param({"group": " "}, "'group' must be a non-empty string", id="blank-group"),
        pytest.param({"tier": 3}, "'tier' must be a non-empty string", id="tier-number"),
    ],
)
def test_contradictory_snapshots_are_refused(change: dict[str, Any], message: str) -> None:
    raw = {**signals_to_dict(make_signals()), **change}
    with pytest.raises(SignalsError, match=message):
        signals_from_dict(raw)


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(
            {"replicas": 4, "ready_replicas": 2, "starting_replicas": 2}, id="all-counted"
        ),
        pytest.param({"warm_replicas": 3, "max_replicas": 3}, id="warm-at-max"),
    ],
)
def test_consistent_counts_load(change: dict[str, Any]) -> None:
    raw = {**signals_to_dict(make_signals()), **change}
    assert signals_from_dict(raw).replicas == raw["replicas"]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        pytest.param({"stale_after_s": float("nan")}, "stale_after_s must be finite", id="nan"),
        pytest.param({"stale_after_s": float("inf")}, "stale_after_s must be finite", id="inf"),
        pytest.param(
            {"forecast_window_s": float("inf")}, "forecast_window_s must be finite", id="window"
        ),
        pytest.param(
            {"headroom_quantile": float("nan")}, "headroom_quantile must be finite", id="quantile"
        ),
        pytest.param(
            {"backlog_drain_s": float("nan"), "rebalance_pause_s": float("-inf")},
            "backlog_drain_s must be finite.*; rebalance_pause_s must be finite",
            id="both-named",
        ),
        pytest.param(
            {"scale_down_hold_s": float("inf")},
            "scale_down_hold_s must be finite",
            id="optional-field",
        ),
        pytest.param({"max_total_replicas": 10**400}, "max_total_replicas must be", id="bigint"),
    ],
)
def test_config_refuses_non_finite(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(SignalsError, match=message):
        config_from_dict(raw)


@pytest.mark.parametrize(
    ("raw", "said", "not_said"),
    [
        pytest.param(
            {"scale_down_window_s": -5},
            "scale_down_window_s must be >= 0, got -5",
            "stale_after_s",
            id="one-field-named-with-its-value",
        ),
        pytest.param(
            {"fallback_replicas": -1},
            "fallback_replicas must be >= 0, got -1",
            "failed_collections_before_fallback",
            id="its-pair-not-named",
        ),
        pytest.param(
            {"burst_low_share": 0.7},
            "burst_low_share must be in (0, 0.5), got 0.7",
            "burst_keep_factor",
            id="an-open-range",
        ),
        pytest.param(
            {"busiest_max_utilization": 0},
            "busiest_max_utilization must be > 0 or null, got 0",
            "burst_floor",
            id="or-null",
        ),
        pytest.param(
            {"min_spare_replicas": 3, "initial_spare_replicas": 2},
            "need min_spare_replicas <= initial_spare_replicas <= max_spare_replicas, got 3 <= 2",
            "min_spare_replicas must be",
            id="across-fields",
        ),
        pytest.param(
            {"utilization_band": 0.8},
            "utilization_band must be under target_utilization (0.7), got 0.8",
            "utilization_band must be >=",
            id="under-another-field",
        ),
    ],
)
def test_config_names_the_field_out_of_range_and_its_value(
    raw: dict[str, Any], said: str, not_said: str
) -> None:
    with pytest.raises(SignalsError) as refused:
        config_from_dict(raw)
    assert said in str(refused.value)
    assert not_said not in str(refused.value)


@pytest.mark.parametrize(
    "field",
    ["stale_after_s", "target_utilization", "backlog_drain_s", "standby_after_gap_s"],
)
def test_config_built_in_code_refuses_nan(field: str) -> None:
    with pytest.raises(SignalsError, match=f"{field} must be finite"):
        PolicyConfig(**{field: float("nan")})  # type: ignore[arg-type]


def test_config_file_with_nan_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text('{"stale_after_s": NaN}')
    with pytest.raises(SignalsError, match="stale_after_s must be finite"):
        load_config(path)


def test_config_file_naming_a_field_twice_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text('{"target_utilization": 0.7, "target_utilization": 0.1}')
    with pytest.raises(SignalsError, match="'target_utilization' is written twice"):
        load_config(path)

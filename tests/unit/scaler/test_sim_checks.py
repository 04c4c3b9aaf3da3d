"""The simulator's inputs: the cluster budget reaches the policy and the start, non-finite
settings, rate scales, traces, tiers, model.yaml and output paths are refused clearly."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from scaler import cli
from scaler.config import PolicyConfig
from scaler.sim.engine import initial_counts, policy_config, simulate
from scaler.sim.params import ServiceModel, SimParams, read_service_model
from scaler.sim.plot import plot_path_problem
from scaler.sim.report import finite_or_null
from scaler.sim.scenarios import poisson_arrivals
from scaler.sim.workload import (
    TierArrivals,
    Workload,
    WorkloadError,
    from_trace,
    read_trace,
    scale_rate,
    split_tiers,
)

TRACE = "TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(
    f"2024-01-01 00:00:{s:02d},100,10\n" for s in range(0, 60, 2)
)


def _trace(tmp_path: Path, text: str = TRACE) -> Path:
    path = tmp_path / "t.csv"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("config_budget", "cluster_budget", "policy_budget"),
    [
        pytest.param(None, None, None, id="neither"),
        pytest.param(None, 24, 24, id="cluster-only"),
        pytest.param(10, 24, 10, id="config-wins"),
        pytest.param(30, None, 30, id="config-only"),
        pytest.param(None, 0, 0, id="zero-cluster"),
    ],
)
def test_policy_gets_the_cluster_budget(
    config_budget: int | None, cluster_budget: int | None, policy_budget: int | None
) -> None:
    config = PolicyConfig(max_total_replicas=config_budget)
    params = SimParams(max_total_replicas=cluster_budget)
    assert policy_config(config, params).max_total_replicas == policy_budget


@pytest.mark.parametrize(
    ("wanted", "groups", "budget", "counts"),
    [
        pytest.param(5, 2, None, [5, 5], id="no-budget"),
        pytest.param(5, 2, 10, [5, 5], id="fits"),
        pytest.param(10, 2, 6, [3, 3], id="even"),
        pytest.param(10, 3, 7, [3, 2, 2], id="remainder-to-higher-tiers"),
        pytest.param(4, 1, 0, [0], id="zero"),
    ],
)
def test_initial_counts(wanted: int, groups: int, budget: int | None, counts: list[int]) -> None:
    assert initial_counts(wanted, groups, budget) == counts


def _two_tiers(rate: float = 200.0, seconds: float = 240.0) -> Workload:
    rng = np.random.default_rng(5)
    t = np.arange(0.0, seconds, 0.1)
    tiers = {}
    for tier in ("interactive", "batch"):
        times = poisson_arrivals(np.full(t.size, rate), rng)
        tiers[tier] = TierArrivals(times, np.full(times.size, 256.0))
    return Workload("two", "two", seconds, tiers)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("policy", "shares_budget"),
    [pytest.param("slo", True, id="slo"), pytest.param("hpa-util", False, id="hpa-util")],
)
def test_simulated_cluster_stays_within_its_budget(policy: str, shares_budget: bool) -> None:
    params = SimParams(
        partitions=16, time_to_ready_s=10, drain_s=60, initial_replicas=8, max_total_replicas=6
    )
    run = simulate(_two_tiers(), params, policy, PolicyConfig())
    running: dict[float, int] = defaultdict(int)
    asked: dict[float, int] = defaultdict(int)
    for tick in run.ticks:
        running[tick.t] += tick.replicas + tick.standby
        asked[tick.t] += tick.desired + tick.desired_standby
    assert max(running.values()) <= 6  # the start was clamped too (it was 16)
    if shares_budget:
        assert max(asked.values()) <= 6
        assert any("global budget 6" in line for line in run.lines)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        pytest.param({"max_total_replicas": -3}, "max_total_replicas must be >= 0", id="budget"),
        pytest.param({"collection_interval_s": math.nan}, "collection_interval_s", id="interval"),
        pytest.param({"time_to_ready_s": math.nan}, "time_to_ready_s must be finite", id="ttr"),
        pytest.param({"time_to_ready_s": math.inf}, "time_to_ready_s must be finite", id="ttr-inf"),
        pytest.param({"handover_pause_s": math.nan}, "handover_pause_s must be", id="handover"),
        pytest.param({"rebalance_pause_s": math.nan}, "rebalance_pause_s must be", id="pause"),
        pytest.param({"drain_s": math.inf}, "drain_s must be finite", id="drain"),
        pytest.param(
            {"slo_p99_e2e_ms": {"interactive": math.nan}},
            r"slo_p99_e2e_ms\[interactive\] must be finite",
            id="slo-nan",
        ),
        pytest.param(
            {"slo_p99_e2e_ms": {"interactive": 0.0}}, "slo_p99_e2e_ms must be > 0", id="slo-0"
        ),
        pytest.param({"max_replicas": 0}, "max_replicas 0 < min_replicas 1", id="max-below-min"),
        pytest.param({"warm_replicas": -1}, "warm_replicas must be >= 0", id="warm-negative"),
        pytest.param(
            {"max_replicas": 8, "initial_replicas": 100_000},
            "initial_replicas 100000 > max_replicas 8",
            id="start-above-max",
        ),
    ],
)
def test_sim_params_refuse(change: dict[str, Any], message: str) -> None:
    with pytest.raises(WorkloadError, match=message):
        SimParams(**change)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        pytest.param({"a_ms": math.nan}, "a_ms must be finite", id="a"),
        pytest.param({"b_ms": math.nan}, "b_ms must be finite", id="b"),
        pytest.param({"max_queue_delay_ms": math.inf}, "max_queue_delay_ms must be", id="delay"),
    ],
)
def test_service_model_refuses_non_finite(change: dict[str, Any], message: str) -> None:
    with pytest.raises(WorkloadError, match=message):
        ServiceModel(**change)


@pytest.mark.parametrize(
    ("rate_scale", "message"),
    [
        pytest.param(math.nan, "must be a finite number > 0, got nan", id="nan"),
        pytest.param(math.inf, "must be a finite number > 0, got inf", id="inf"),
        pytest.param(0.0, "must be a finite number > 0", id="zero"),
        pytest.param(-2.0, "must be a finite number > 0", id="negative"),
        pytest.param(1e30, "rate_scale 1e\\+30 makes ~3e\\+31 requests of 30", id="huge"),
    ],
)
def test_scale_rate_refuses(rate_scale: float, message: str) -> None:
    times = np.arange(30.0)
    with pytest.raises(WorkloadError, match=message):
        scale_rate(times, np.ones(30), rate_scale, np.random.default_rng(1))


@pytest.mark.parametrize(
    ("rate_scale", "tiers", "message"),
    [
        pytest.param(1e-9, ["interactive"], "no requests after scaling the rate by 1e-09", id="0"),
        pytest.param(
            0.04,
            ["interactive", "batch", "critical"],
            r"no requests for tier\(s\)",
            id="empty-tier",
        ),
        pytest.param(
            1.0,
            ["interactive", "interactive"],
            r"name \['interactive'\] more than once",
            id="tier-twice",
        ),
    ],
)
def test_from_trace_refuses_empty_or_doubled(
    tmp_path: Path, rate_scale: float, tiers: list[Any], message: str
) -> None:
    with pytest.raises(WorkloadError, match=message):
        from_trace(
            _trace(tmp_path), rate_scale=rate_scale, tiers=tiers, max_input_tokens=512, seed=1
        )


def test_split_tiers_refuses_a_tier_twice() -> None:
    with pytest.raises(WorkloadError, match="more than once"):
        split_tiers(np.arange(4.0), np.ones(4), ["batch", "batch"], np.random.default_rng(1))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46,1\n",
            "one request only \\(a trace needs a span\\)",
            id="one-row",
        ),
        pytest.param(
            "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46,1\n2023-11-16 18:15:46,2\n",
            "same TIMESTAMP \\(a trace needs a span\\)",
            id="two-rows-one-time",
        ),
    ],
)
def test_trace_needs_a_span(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(WorkloadError, match=message):
        read_trace(_trace(tmp_path, text))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("engine: 5\n", "'engine' must be a mapping", id="engine-number"),
        pytest.param("engine: [1, 2]\n", "'engine' must be a mapping", id="engine-list"),
        pytest.param("engine:\n  sim:\n    a_ms: -1\n", "greater than or equal", id="negative"),
        pytest.param(
            "name: demo-mlp\nengine:\n  kind: onnxruntime\n",
            "has no engine.sim block .* `inferbus models calibrate demo-mlp`",
            id="no-sim-block",
        ),
        pytest.param("name: x\n", "has no engine.sim block", id="no-engine"),
    ],
)
def test_model_yaml_errors_are_clear(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "model.yaml"
    path.write_text(text)
    with pytest.raises(WorkloadError, match=message):
        read_service_model(path)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        pytest.param("out.png", None, id="png"),
        pytest.param("new/dir/out.svg", None, id="new-dirs"),
        pytest.param("out.PDF", None, id="upper-case"),
        pytest.param("out.txt", "must end in .png, .svg, .pdf", id="text"),
        pytest.param("out", "must end in", id="no-extension"),
        pytest.param(".", "is a folder", id="directory"),
        pytest.param("file.csv/out.png", "file.csv is a file, not a folder", id="under-a-file"),
    ],
)
def test_plot_path_problem(tmp_path: Path, name: str, message: str | None) -> None:
    (tmp_path / "file.csv").write_text("x")
    problem = plot_path_problem(tmp_path / name)
    if message is None:
        assert problem is None
    else:
        assert problem is not None and message in problem


def _app() -> typer.Typer:
    app = typer.Typer()
    app.add_typer(cli.scaler_app, name="scaler")
    app.command("sim")(cli.sim_command)
    return app


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["sim", "--seed", "-1"], "--seed", id="sim-seed"),
        pytest.param(["scaler", "traffic", "on-off", "--seed", "-1"], "--seed", id="traffic-seed"),
        pytest.param(
            ["scaler", "traffic", "on-off", "--out", "t.csv.gz"],
            "written as plain CSV",
            id="traffic-gz",
        ),
        pytest.param(
            ["sim", "--rebalance-pause-s", "3"],
            "--rebalance-pause-s applies to --pause-model eager only",
            id="pause-flag-of-the-other-model",
        ),
        pytest.param(
            ["sim", "--no-recall"],
            "--no-recall applies with --scaler-restart-at-s only",
            id="no-recall-without-a-restart",
        ),
        pytest.param(
            ["sim", "--scaler-restart-gap-s", "30"],
            "--scaler-restart-gap-s applies with --scaler-restart-at-s only",
            id="gap-without-a-restart",
        ),
        pytest.param(
            ["sim", "--scaler-restart-gap-s", "0"],
            "--scaler-restart-gap-s applies with --scaler-restart-at-s only",
            id="no-gap-without-a-restart",
        ),
        pytest.param(
            ["sim", "--scaler-restart-at-s", "10", "--scaler-restart-gap-s", "-1"],
            "scaler_restart_gap_s (--scaler-restart-gap-s) must be >= 0",
            id="gap-negative",
        ),
        pytest.param(
            ["sim", "--scaler-restart-at-s", "10", "--scaler-restart-gap-s", "1e6"],
            "the new scaler would never start",
            id="gap-past-the-end",
        ),
        pytest.param(["sim", "--queues", "foo"], "queues (--queues) must be one of", id="queues"),
        pytest.param(["sim", "--slo-ms", "0"], "(--slo-ms) must be > 0", id="slo-zero"),
        pytest.param(
            ["sim", "--tiers", "interactive,interactive"], "interactive more than once", id="tiers"
        ),
        pytest.param(["sim", "--plot", "out.txt"], "must end in .png", id="plot-extension"),
        pytest.param(["sim", "--plot", "."], "is a folder", id="plot-directory"),
        pytest.param(["sim", "--json", "."], "is a folder", id="json-directory"),
        pytest.param(["sim", "--max-total-replicas", "-3"], "must be >= 0", id="budget"),
        pytest.param(["sim", "--interval-s", "1e308"], "the policy would never act", id="interval"),
        pytest.param(["sim", "--a-ms", "1e300"], "a_ms must be at most 60000 ms", id="a-ms-huge"),
        pytest.param(["sim", "--b-ms", "-1"], "b_ms must be >= 0, got -1", id="b-ms-negative"),
        pytest.param(["sim", "--interval-s", "nan"], "must be finite", id="interval-nan"),
        pytest.param(["sim", "--rate-scale", "inf"], "finite number > 0", id="rate-inf"),
        pytest.param(
            ["sim", "--partitions", "100000000"],
            "partitions (--partitions) must be at most 100000",
            id="partitions-past-memory",
        ),
        pytest.param(
            ["sim", "--interval-s", "0"],
            "collection_interval_s (--interval-s) must be > 0, got 0",
            id="interval-zero",
        ),
        pytest.param(
            ["sim", "--min-replicas", "5", "--max-replicas", "2"],
            "max_replicas (--max-replicas) 2 < min_replicas (--min-replicas) 5",
            id="max-below-min",
        ),
        pytest.param(
            ["sim", "--interval-s", "0.0001"], "the simulator runs at most", id="ticks-past-bound"
        ),
        pytest.param(["sim", "--tiers", ""], "--tiers names no tier", id="tiers-empty"),
        pytest.param(
            ["sim", "--min-replicas", "-1"],
            "error: min_replicas (--min-replicas) must be >= 0, got -1\n",
            id="floor-refused-once",
        ),
        pytest.param(
            ["sim", "--max-replicas", "4", "--initial-replicas", "10"],
            "initial_replicas (--initial-replicas) 10 > max_replicas (--max-replicas) 4",
            id="start-above-max",
        ),
        pytest.param(
            ["sim", "--json", "file.csv/report.json"],
            "is a file, not a folder",
            id="json-parent",
        ),
    ],
)
def test_cli_refuses_before_simulating(tmp_path: Path, args: list[str], message: str) -> None:
    trace = str(_trace(tmp_path))
    (tmp_path / "file.csv").write_text("x")
    args = [str(tmp_path / a) if a.startswith("file.csv/") else a for a in args]
    if args[0] == "sim":
        args = [*args, "--trace", trace, "--policy", "slo"]
    elif "--out" not in args:
        args = [*args, "--out", str(tmp_path / "o.csv")]
    result = CliRunner().invoke(_app(), args, env={"COLUMNS": "200"})
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "simulated in" not in result.output


def test_cli_says_where_the_plot_went(tmp_path: Path) -> None:
    out = tmp_path / "plots" / "run.png"
    args = ["sim", "--trace", str(_trace(tmp_path)), "--policy", "slo", "--plot", str(out)]
    result = CliRunner().invoke(_app(), args, env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    assert f"plot written to {out}" in result.output
    assert out.stat().st_size > 0


def test_a_trace_spanning_years_is_refused_before_simulating(tmp_path: Path) -> None:
    """One row dated 2099 made a 75-year run that no one was told about."""
    trace = tmp_path / "typo.csv"
    trace.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2024-01-01 00:00:00,100,10\n2099-01-01 00:00:00,100,10\n"
    )
    args = ["sim", "--trace", str(trace), "--policy", "slo"]
    result = CliRunner().invoke(_app(), args, env={"COLUMNS": "300"})
    assert result.exit_code == 2, result.output
    assert "are the trace's timestamps right" in result.output


def test_a_report_keeps_nan_in_names_and_nulls_only_numbers(tmp_path: Path) -> None:
    """NaN was replaced in the report's text: a trace named NaN-night.csv read null-night."""
    trace = _trace(tmp_path).rename(tmp_path / "NaN-night.csv")
    out = tmp_path / "r.json"
    args = ["sim", "--trace", str(trace), "--policy", "slo", "--json", str(out)]
    result = CliRunner().invoke(_app(), args, env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert "NaN-night" in report["source"]


@pytest.mark.parametrize(
    ("value", "written"),
    [
        pytest.param(float("nan"), None, id="nan"),
        pytest.param({"a": [1.5, float("inf")]}, {"a": [1.5, None]}, id="nested-inf"),
        pytest.param(("NaN", -float("inf")), ["NaN", None], id="a-string-stays"),
    ],
)
def test_finite_or_null(value: object, written: object) -> None:
    assert finite_or_null(value) == written


def test_a_path_that_names_a_setting_keeps_its_name(tmp_path: Path) -> None:
    """Each setting's flag goes beside its name in the settings' errors, not into paths."""
    trace = tmp_path / "partitions.csv"
    trace.write_text("time,tokens\n1,2\n")
    result = CliRunner().invoke(_app(), ["sim", "--trace", str(trace)], env={"COLUMNS": "300"})
    assert result.exit_code == 2, result.output
    assert "partitions.csv" in result.output
    assert "(--partitions)" not in result.output


def test_traffic_says_why_it_cannot_write_before_generating(tmp_path: Path) -> None:
    (tmp_path / "file.csv").write_text("x")
    out = tmp_path / "file.csv" / "t.csv"
    result = CliRunner().invoke(_app(), ["scaler", "traffic", "on-off", "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert "is a file, not a folder" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--json", "[a]"], "error: --json [a] is a folder", id="output-problem"),
        pytest.param(
            ["--trace", "[b]/t.csv"], "error: cannot read [b]/t.csv", id="workload-problem"
        ),
        pytest.param(
            ["--interval-s", "0"], "error: collection_interval_s (--interval-s)", id="settings"
        ),
    ],
)
def test_cli_errors_print_their_words_not_markup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], message: str
) -> None:
    """`[red]error:[/red]` was printed as such; a `[b]` in a path was read as markup."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "[a]").mkdir()
    base = ["sim", "--policy", "slo"]
    if "--trace" not in args:
        base += ["--trace", str(_trace(tmp_path))]
    result = CliRunner().invoke(_app(), [*base, *args], env={"COLUMNS": "300"})
    assert result.exit_code == 2, result.output
    assert result.output.startswith(message), result.output
    assert "[red]" not in result.output


@pytest.mark.parametrize(
    "flag", [["--rate-scale", "2"], ["--tiers", "batch"]], ids=["rate-scale", "tiers"]
)
def test_a_scenario_refuses_the_flags_that_only_a_trace_takes(flag: list[str]) -> None:
    """`--scenario burst --rate-scale -5 --tiers foo` ran as if neither was given."""
    args = ["sim", "--scenario", "burst", "--policy", "slo", *flag]
    result = CliRunner().invoke(_app(), args, env={"COLUMNS": "200"})
    assert result.exit_code == 2, result.output
    assert flag[0] in result.output and "apply to --trace" in result.output

"""Live scenarios, steady rates and trace windows: their arrivals match what they promise."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from scaler.sim.workload import WorkloadError
from services.load.scenarios import SCENARIOS, clip_lengths, rate_workload, scenario_workload
from services.load.trace import input_lengths, trace_workload, window

AZURE = Path(__file__).parents[4] / "shared" / "traces" / "azure_llm_conv_2023.csv"


def rate_in(times: np.ndarray, start: float, end: float) -> float:  # type: ignore[type-arg]
    return float(np.count_nonzero((times >= start) & (times < end))) / (end - start)


@pytest.mark.parametrize(
    ("name", "tier", "phase_rates"),
    [
        ("burst", "interactive", {"before": 40, "burst": 240, "after": 40}),
        ("long-context", "interactive", {"short": 15, "long": 15, "short-again": 15}),
        ("mixed", "interactive", {"base": 30, "batch-x2": 30, "base-again": 30}),
        ("mixed", "batch", {"base": 10, "batch-x2": 20, "base-again": 10}),
        ("warmup", "interactive", {"low": 20}),
    ],
    ids=["burst", "long-context", "mixed-interactive", "mixed-batch", "warmup"],
)
def test_scenario_rates_per_phase(name: str, tier: str, phase_rates: dict[str, float]) -> None:
    workload = scenario_workload(name, seed=3)
    bounds = {p.name: (p.start_s, p.end_s) for p in workload.phases}
    times = workload.tiers[tier].times  # type: ignore[index]
    for phase, expected in phase_rates.items():
        assert rate_in(times, *bounds[phase]) == pytest.approx(expected, rel=0.2), phase
    assert workload.duration_s == 90
    assert SCENARIOS[name].focus_phase in bounds


def test_scenarios_are_seeded_and_scaled() -> None:
    a, b = scenario_workload("burst", seed=5), scenario_workload("burst", seed=5)
    assert np.array_equal(a.tiers["interactive"].times, b.tiers["interactive"].times)
    double = scenario_workload("burst", rate_scale=2.0, seed=5)
    assert double.total() == pytest.approx(2 * a.total(), rel=0.05)


def test_long_context_inputs_turn_long_then_short() -> None:
    arrivals = scenario_workload("long-context").tiers["interactive"]
    long = (arrivals.times >= 15) & (arrivals.times < 75)
    assert np.median(arrivals.tokens[long]) == pytest.approx(450, rel=0.05)
    assert np.median(arrivals.tokens[~long]) == pytest.approx(64, rel=0.15)
    assert arrivals.tokens.max() <= 512


def test_warmup_ramps_faster_than_a_worker_starts() -> None:
    times = scenario_workload("warmup").tiers["interactive"].times
    assert rate_in(times, 15, 17) < 80
    assert rate_in(times, 25, 60) == pytest.approx(200, rel=0.1)
    assert rate_in(times, 60, 90) == pytest.approx(20, rel=0.25)


NAN, INF = float("nan"), float("inf")
CAP = "a load run sends at most 1,000,000"


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: scenario_workload("nope"), "unknown scenario 'nope'"),
        (lambda: scenario_workload("burst", rate_scale=0), "--rate-scale must be a finite .* 0"),
        (lambda: scenario_workload("burst", rate_scale=NAN), "--rate-scale .* not nan"),
        (lambda: scenario_workload("burst", rate_scale=INF), "--rate-scale .* not inf"),
        (lambda: scenario_workload("burst", rate_scale=1e6), CAP),
        (lambda: rate_workload(0, 10, ["interactive"], tokens=8), "--rate must be a finite"),
        (lambda: rate_workload(NAN, 10, ["interactive"], tokens=8), "--rate .* not nan"),
        (lambda: rate_workload(INF, 10, ["interactive"], tokens=8), "--rate .* not inf"),
        (lambda: rate_workload(1e9, 1, ["interactive"], tokens=8), CAP),
        (lambda: rate_workload(5, INF, ["interactive"], tokens=8), "--duration .* not inf"),
        (lambda: rate_workload(5, NAN, ["interactive"], tokens=8), "--duration .* not nan"),
        (lambda: rate_workload(1e-9, 1e12, ["interactive"], tokens=8), "longer than a load"),
        (lambda: rate_workload(5, 10, ["interactive"], tokens=0), "--tokens must be >= 1"),
    ],
    ids=[
        "unknown", "zero-scale", "nan-scale", "inf-scale", "scale-over-cap", "zero-rate",
        "nan-rate", "inf-rate", "rate-over-cap", "inf-duration", "nan-duration",
        "duration-over-a-day", "zero-tokens",
    ],
)  # fmt: skip
def test_bad_requests_are_refused(call: object, message: str) -> None:
    """Refused with the flag named, before any arrival is drawn (1e9/s for 1 s once tried
    to allocate 7.45 GiB; NaN passed every `<= 0` check)."""
    with pytest.raises(WorkloadError, match=message):
        call()  # type: ignore[operator]


def test_rate_splits_over_tiers() -> None:
    workload = rate_workload(40, 30, ["interactive", "batch"], tokens=12, seed=2)
    for tier in ("interactive", "batch"):
        arrivals = workload.tiers[tier]  # type: ignore[index]
        assert rate_in(arrivals.times, 0, 30) == pytest.approx(20, rel=0.15)
        assert set(arrivals.tokens.tolist()) == {12.0}


def test_trace_window_and_lengths() -> None:
    times = np.array([0.0, 1.0, 2.5, 4.0, 9.0])
    tokens = np.array([100.0, 200.0, 300.0, 400.0, 500.0])
    t, n = window(times, tokens, 1.0, 3.0)
    assert t.tolist() == [0.0, 1.5] and n.tolist() == [200.0, 300.0]
    mapped = input_lengths(np.array([1.0, 1020.0, 4142.0, 9000.0]), 0.125, 512)
    assert mapped.tolist() == [1.0, 128.0, 512.0, 512.0]


def _trace(path: Path, rows: list[tuple[str, int]]) -> Path:
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(f"{t},{n},1\n" for t, n in rows)
    )
    return path


def test_trace_workload_is_bounded_and_scaled(tmp_path: Path) -> None:
    rows = [(f"2023-11-16 18:00:{s:02d}.5000000", 800 + s) for s in range(60)]
    trace = _trace(tmp_path / "t.csv", rows)
    workload = trace_workload(
        trace, start_s=10, duration_s=20, rate_scale=3.0, token_scale=0.5, max_tokens=512,
        tiers=["interactive"], seed=1,
    )  # fmt: skip
    arrivals = workload.tiers["interactive"]
    assert arrivals.times.max() < 20
    assert arrivals.times.size == pytest.approx(60, abs=6)
    assert arrivals.tokens.min() >= 405 and arrivals.tokens.max() <= 415
    with pytest.raises(WorkloadError, match="no request between 100 s and 120 s"):
        trace_workload(
            trace, start_s=100, duration_s=20, rate_scale=1, token_scale=1, max_tokens=512,
            tiers=["interactive"],
        )  # fmt: skip


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"token_scale": NAN}, "--token-scale .* not nan"),
        ({"token_scale": 0.0}, "--token-scale must be a finite number > 0"),
        ({"rate_scale": NAN}, "--rate-scale .* not nan"),
        ({"rate_scale": INF}, "--rate-scale .* not inf"),
        ({"rate_scale": 1e6}, CAP),
        ({"start_s": NAN}, "--trace-start .* not nan"),
        ({"start_s": -1.0}, "--trace-start must be a finite number >= 0"),
        ({"duration_s": INF}, "--duration .* not inf"),
    ],
    ids=[
        "nan-token-scale", "zero-token-scale", "nan-rate-scale", "inf-rate-scale",
        "rate-scale-over-cap", "nan-start", "negative-start", "inf-duration",
    ],
)  # fmt: skip
def test_bad_trace_numbers_are_refused(
    tmp_path: Path, change: dict[str, float], message: str
) -> None:
    trace = _trace(tmp_path / "t.csv", [(f"2023-11-16 18:00:{s:02d}.5", 800) for s in range(60)])
    args: dict[str, float] = {"start_s": 0.0, "duration_s": 30.0, "rate_scale": 1.0,
                              "token_scale": 0.125} | change  # fmt: skip
    with pytest.raises(WorkloadError, match=message):
        trace_workload(trace, **args, max_tokens=512, tiers=["interactive"])  # type: ignore[arg-type]


@pytest.mark.skipif(not AZURE.exists(), reason="the shared Azure trace is not here")
def test_the_azure_trace_replays_two_minutes() -> None:
    workload = trace_workload(
        AZURE, start_s=0, duration_s=120, rate_scale=2.0, token_scale=0.125, max_tokens=512,
        tiers=["interactive", "batch"],
    )  # fmt: skip
    assert 500 < workload.total() < 3000
    assert all(a.tokens.max() <= 512 for a in workload.tiers.values())


@pytest.mark.parametrize(("max_tokens", "some_clipped"), [(128, True), (512, False)])
def test_scenario_inputs_clipped_to_what_the_model_takes(
    max_tokens: int, some_clipped: bool
) -> None:
    """long-context sends up to 512 tokens; a 128-token model gets 128, and is told how many."""
    workload = scenario_workload("long-context")
    clipped, count = clip_lengths(workload, max_tokens)
    longest = max(float(a.tokens.max()) for a in clipped.tiers.values())
    before = sum(int((a.tokens > max_tokens).sum()) for a in workload.tiers.values())
    assert longest <= max_tokens
    assert count == before
    assert (count > 0) is some_clipped
    assert clipped.total() == workload.total()

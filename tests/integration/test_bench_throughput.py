"""`inferbus bench throughput` end to end on the embedded broker, kept small: every request
answered in both phases, the open loop's arrivals Poisson, each process's CPU reported."""

from __future__ import annotations

import pytest

from schemas.topics import Tier
from services.bench.throughput import ThroughputOptions, bench_throughput

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    "tier", [pytest.param(None, id="shared-topic"), pytest.param("critical", id="critical-lane")]
)
async def test_a_small_null_engine_run_answers_everything_and_reports_its_costs(
    tier: Tier | None,
) -> None:
    said: list[str] = []
    options = ThroughputOptions(
        engine="null", requests=400, window=64, raw_seconds=0.5, open_rate=50.0, tier=tier
    )

    report = await bench_throughput(options, said.append)

    saturation, open_loop = report["saturation"], report["half_load"]
    assert saturation["answered"] == saturation["sent"] == 400, said[-5:]
    assert saturation["statuses"] == {"ok": 400}
    assert open_loop["arrivals"] == "poisson"
    assert open_loop["rate_rps"] == 50.0
    assert open_loop["answered"] == open_loop["sent"] == 500
    assert open_loop["statuses"] == {"ok": 500}
    cpu = saturation["cpu"]["cpu_ms_per_request"]
    assert {"broker", "loadgen", "ingest-0"} <= set(cpu)
    assert all(value >= 0 for value in cpu.values())
    assert report["tier"] == (tier or "interactive (shared ingest topic)")


async def test_a_model_run_checks_its_answers_against_onnx_runtime_run_directly() -> None:
    """A bench that reported a fast rate of wrong answers would measure nothing."""
    said: list[str] = []
    options = ThroughputOptions(requests=400, window=64, raw_seconds=0.5, open_rate=50.0)

    report = await bench_throughput(options, said.append)

    outputs = report["outputs"]
    assert outputs["checked"] >= 10, said[-5:]
    assert outputs["matched"], outputs
    assert outputs["max_abs_diff"] <= outputs["tolerance"]
    assert any(line.startswith("outputs: ") for line in said)

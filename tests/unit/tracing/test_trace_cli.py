"""`inferbus trace` shows the part of e2e that no stage covers, so the shares add up."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from tracing.cli import UNSTAGED, render, unstaged_ms
from tracing.jaeger import breakdown_from_timings

# A newcomer's request on an idle stack (stop 32): the stages covered a fifth of e2e.
IDLE = {
    "ingest_ms": 0.75,
    "queue_ms": 8.05,
    "batch_wait_ms": 2.44,
    "preprocess_ms": 0.78,
    "infer_ms": 0.46,
    "postprocess_ms": 0.19,
    "e2e_ms": 63.67,
}


@pytest.mark.parametrize(
    ("stages", "e2e", "expected"),
    [
        pytest.param({"queue": 8.0, "infer": 2.0}, 15.0, 5.0, id="the-rest"),
        pytest.param({"queue": 8.0, "publish": 30.0}, 10.0, 2.0, id="publish-comes-after-e2e"),
        pytest.param({"queue": 8.0, "e2e": 10.0}, 10.0, 2.0, id="e2e-is-not-a-part"),
        pytest.param({"queue": 12.0}, 10.0, None, id="clocks-disagree"),
        pytest.param({"queue": 10.0}, 10.0, None, id="nothing-left"),
        pytest.param({"queue": 8.0}, None, None, id="no-e2e"),
    ],
)
def test_unstaged_ms(stages: dict[str, float], e2e: float | None, expected: float | None) -> None:
    assert unstaged_ms(stages, e2e) == (pytest.approx(expected) if expected else None)


def test_the_table_shows_the_time_outside_every_stage() -> None:
    out = io.StringIO()
    render(breakdown_from_timings("r-1", IDLE), Console(file=out, width=120))

    row = next(line for line in out.getvalue().splitlines() if UNSTAGED in line)
    assert "51.00" in row and "80.1" in row

"""A process's start time, which time-to-ready counts from (its imports included)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from infra.processes import process_started_at

STAT = "4242 (python3 (x)) S 1 4242 4242 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 {ticks} 0 0"


@pytest.mark.parametrize(
    ("ticks_s", "uptime_s", "age_s"),
    [
        pytest.param(100.0, 103.5, 3.5, id="started-3.5s-ago"),
        pytest.param(100.0, 100.0, 0.0, id="just-now"),
        pytest.param(100.0, 99.0, 0.0, id="clock-skew-never-in-the-future"),
    ],
)
def test_age_from_the_stat_line(ticks_s: float, uptime_s: float, age_s: float) -> None:
    hz = os.sysconf("SC_CLK_TCK")
    stat = STAT.format(ticks=int(ticks_s * hz))
    started = process_started_at(stat, since_boot_s=uptime_s)
    assert time.time() - started == pytest.approx(age_s, abs=0.05)


def test_a_bad_stat_line_falls_back_to_now() -> None:
    assert time.time() - process_started_at("garbage", since_boot_s=5.0) == pytest.approx(
        0, abs=0.05
    )


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_counts_what_ran_before_the_import() -> None:
    code = (
        "import time; time.sleep(0.5); from infra.processes import process_started_at;"
        " print(time.time() - process_started_at())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert 0.5 <= float(out.stdout) < 10

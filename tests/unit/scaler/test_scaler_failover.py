"""`scripts/scaler_failover.py`: what it reads from the logs and the load's report."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from tests.unit.scaler.conftest import load_script

failover = load_script("scaler_failover")

FAULT = datetime(2026, 12, 8, 0, 10, 8, 784000)

STANDBY_LOG = """\
2026-12-08 00:09:40,000 INFO scaler.lease_keeper event=scaler_standby holder=scaler-a term=1
2026-12-08 00:10:08,915 INFO scaler.lease_keeper event=lease_taken term=2 lease_s=4
2026-12-08 00:09:50,000 INFO services.worker.app event=worker_ready instance=w0
2026-12-08 00:10:14,123 INFO services.worker.app event=worker_ready instance=w1
a line with no time event=worker_ready
"""

HOLDER_LOG = """\
2026-12-08 00:10:08,788 INFO scaler.lease_keeper event=lease_released term=1
2026-12-08 00:10:26,449 INFO scaler.handover event=handed_over to=scaler-b after_s=17.5
"""


def test_log_times_reads_the_services_time_format() -> None:
    times = failover.log_times(STANDBY_LOG, "event=worker_ready")
    assert times == [datetime(2026, 12, 8, 0, 9, 50), datetime(2026, 12, 8, 0, 10, 14, 123000)]


@pytest.mark.parametrize(
    ("times", "expected"),
    [
        pytest.param([], None, id="none"),
        pytest.param([datetime(2026, 12, 8, 0, 9, 0)], None, id="only-before"),
        pytest.param(
            [datetime(2026, 12, 8, 0, 9, 0), datetime(2026, 12, 8, 0, 10, 10, 784000)],
            2.0,
            id="first-after-the-fault",
        ),
    ],
)
def test_first_after(times: list[datetime], expected: float | None) -> None:
    assert failover.first_after(times, FAULT) == expected


def _report(**totals: Any) -> dict[str, Any]:
    return {
        "tiers": {"interactive": {"e2e_ms": {"p50": 28.0, "p99": 75.0}}},
        "totals": {
            "sent": 10,
            "answered": 10,
            "lost": 0,
            "duplicates": 0,
            "statuses": {"ok": 9, "deadline_exceeded": 1},
            **totals,
        },
        "checks": [{"name": "nothing lost", "ok": True, "detail": ""}],
    }


def test_summary_takes_the_times_after_the_fault() -> None:
    row = failover.summary(_report(), STANDBY_LOG, HOLDER_LOG, FAULT)
    assert row["lease_taken_after_s"] == pytest.approx(0.131)
    assert row["standby_worker_ready_after_s"] == pytest.approx(5.339)  # not the one before
    assert row["handed_over_after_s"] == 17.5
    assert (row["errors"], row["e2e_p99_ms"], row["checks"]) == (1, 75.0, {"nothing lost": True})


def test_summary_of_a_holder_that_did_not_hand_over() -> None:
    row = failover.summary(_report(lost=2), "", "", FAULT)
    assert row["lost"] == 2
    assert row["lease_taken_after_s"] is None
    assert row["handed_over_after_s"] is None


@pytest.mark.parametrize(
    "argv",
    [["OUT", "--ways", "kill,nap"], ["OUT", "--ways", ","], ["OUT", "--at", "90"]],
)
def test_wrong_arguments_are_refused(argv: list[str], tmp_path: Any) -> None:
    argv[0] = str(tmp_path / "out")
    with pytest.raises(SystemExit) as stopped:
        failover.main(argv)
    assert stopped.value.code == 2
    assert not (tmp_path / "out").exists()

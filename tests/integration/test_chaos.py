"""`inferbus chaos --short` on the embedded stack: every scenario meets issue 9's targets.

Each scenario starts its own embedded broker, ingest, workers and scaler (the broker
fixture is not used: a scenario restarts or kills parts of its stack). The scenarios that
need the services' self-healing (issue 9 items 2 and 3) are expected to fail until it
lands; their assertion is the same as everyone's.
"""

from __future__ import annotations

import pytest

from services.chaos.report import lines
from services.chaos.runner import run_scenarios
from services.chaos.scenarios import SCENARIOS

pytestmark = [pytest.mark.integration, pytest.mark.slow]

NOT_HEALED_YET = "issue 9 item 2: the stack does not restart a process that exits"
BROKER_NOT_SURVIVED_YET = (
    "issue 9 item 3: after a broker restart the services neither re-create topics nor "
    "rebuild their clients; ingest stops routing"
)


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("poison", id="poison"),
        pytest.param("malformed-storm", id="malformed-storm"),
        pytest.param("overload", id="overload"),
        pytest.param("rebalance", id="rebalance"),
        # Replaced today by the scaler once the dead worker's lease runs out (~7 s after
        # the kill), just over the bound (the replacement's time-to-ready + 5 s, ~6.3 s):
        # not strict, a slow machine's longer time-to-ready can let it pass.
        pytest.param(
            "worker-kill",
            id="worker-kill",
            marks=pytest.mark.xfail(reason=NOT_HEALED_YET, strict=False),
        ),
        pytest.param(
            "ingest-kill",
            id="ingest-kill",
            marks=pytest.mark.xfail(reason=NOT_HEALED_YET, strict=True),
        ),
        pytest.param(
            "broker-restart",
            id="broker-restart",
            marks=pytest.mark.xfail(reason=BROKER_NOT_SURVIVED_YET, strict=True),
        ),
    ],
)
async def test_short_scenario_meets_its_targets(name: str) -> None:
    said: list[str] = []
    [report] = await run_scenarios([name], short=True, progress=said.append)
    assert report.tally.sent > 0, "\n".join(lines(report) + said)
    assert report.passed, "\n".join(lines(report) + said[-15:])


def test_every_scenario_is_covered() -> None:
    covered = {
        "poison",
        "malformed-storm",
        "overload",
        "rebalance",
        "worker-kill",
        "ingest-kill",
        "broker-restart",
    }
    assert set(SCENARIOS) == covered

"""What `inferbus up` tells each ingest instance through its environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from schemas.topics import Tier
from services.cli.stack import Stack
from services.ingest.settings import IngestSettings
from tests.unit.cli.stacks import headless_options


@pytest.mark.parametrize(
    ("tiers", "served"),
    [
        pytest.param(None, ["critical", "interactive", "batch"], id="every-tier"),
        pytest.param(["interactive"], ["interactive"], id="one"),
        pytest.param(["batch", "critical"], ["batch", "critical"], id="two"),
    ],
)
def test_ingest_serves_the_tiers_up_runs_workers_for(
    tiers: list[Tier] | None,
    served: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Regression: with `--tiers interactive` ingest took batch requests that no worker
    would ever read."""
    env = Stack(headless_options(tmp_path, tiers=tiers))._ingest_env(0)
    monkeypatch.delenv("INFERBUS_INGEST_TIERS", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)

    assert IngestSettings().tiers == served

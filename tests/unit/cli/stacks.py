"""The `inferbus up` options the unit tests build a `Stack` from."""

from __future__ import annotations

from pathlib import Path

from schemas.topics import Tier
from services.cli.stack import StackOptions


def headless_options(
    tmp_path: Path, *, bootstrap: str | None = None, tiers: list[Tier] | None = None
) -> StackOptions:
    """Headless, one worker a group, the scaler on, models and logs under `tmp_path`."""
    return StackOptions(
        bootstrap=bootstrap,
        models_dir=tmp_path / "models",
        workers_per_group=1,
        headless=True,
        duration_s=None,
        with_scaler=True,
        tiers=tiers,
        broker_port=None,
        log_dir=tmp_path / "logs",
    )

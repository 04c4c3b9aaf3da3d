"""`inferbus scaler decide` and `inferbus sim`: run a policy on a snapshot, or in simulation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from scaler.policy import POLICIES
from scaler.signals import PolicyConfig, SignalsError, load_config, load_snapshot

scaler_app = typer.Typer(help="The scaler: decide on a signals snapshot.", no_args_is_help=True)


@scaler_app.callback()
def _scaler_group() -> None:
    """The scaler's commands (kept a group even while it has one command)."""


def _config(path: Path | None) -> PolicyConfig:
    return PolicyConfig() if path is None else load_config(path)


def _policy_names(value: str) -> str:
    if value not in POLICIES:
        raise typer.BadParameter(f"choose one of {sorted(POLICIES)}")
    return value


@scaler_app.command("decide")
def decide_command(
    signals: Annotated[Path, typer.Option("--signals", help="Snapshot JSON (see docs/scaler.md).")],
    config: Annotated[
        Path | None, typer.Option("--config", help="PolicyConfig JSON; defaults otherwise.")
    ] = None,
    policy: Annotated[
        str, typer.Option("--policy", help="slo | keda-lag | hpa-util", callback=_policy_names)
    ] = "slo",
    explain: Annotated[
        bool, typer.Option("--explain", help="Also print one readable line per group.")
    ] = False,
) -> None:
    """Run the policy once on a snapshot and print the decision JSON, one object per group."""
    try:
        snapshot = load_snapshot(signals)
        cfg = _config(config)
    except SignalsError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=2) from exc
    decision, _ = POLICIES[policy](snapshot.signals, snapshot.state, cfg, snapshot.now)
    for group in decision.groups:
        typer.echo(json.dumps(group.to_dict(), indent=2))
        if explain:
            typer.echo(group.line(), err=True)


def main() -> None:
    """Standalone entry mirroring the main CLI: `python -m scaler.cli scaler decide ...`."""
    app = typer.Typer(no_args_is_help=True)
    app.add_typer(scaler_app, name="scaler")
    app()


if __name__ == "__main__":
    main()

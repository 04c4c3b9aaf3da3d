"""`--help` of every CLI command shows no Kafka secret, even when the environment holds one."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from services.cli.main import app

SECRET = "help-must-not-show-this"


def _paths(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every command and group under `command`, as argument paths."""
    yield path
    for name, sub in getattr(command, "commands", {}).items():
        yield from _paths(sub, (*path, name))


def test_help_output_has_no_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERBUS_KAFKA_SASL_PASSWORD", SECRET)
    monkeypatch.setenv("INFERBUS_KAFKA_SSL_PASSWORD", SECRET)
    root = typer.main.get_command(app)
    paths = list(_paths(root))
    assert len(paths) > 5
    runner = CliRunner()
    for path in paths:
        result = runner.invoke(app, [*path, "--help"])
        assert result.exit_code == 0, (path, result.output)
        assert SECRET not in result.output, path

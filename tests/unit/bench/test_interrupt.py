"""Ctrl-C in `bench throughput` or `bench buckets`: exit 130 and a report of the phases that
ran in full, marked as cut short (it once wrote nothing, and a long run's raw figure was
lost with the rest)."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from services.bench import buckets, throughput
from services.cli import bench as bench_cli
from services.cli.main import app


async def _interrupted_after_raw(
    options: throughput.ThroughputOptions, progress: Any, ran: dict[str, Any]
) -> dict[str, Any]:
    ran.update(benchmark="throughput", model=options.model, raw_engine={"samples_per_s": 1.0})
    signal.raise_signal(signal.SIGINT)  # the signal itself, to asyncio.run's handler
    await asyncio.sleep(3600)
    raise AssertionError("unreachable")


async def _interrupted_after_one_variant(**kwargs: Any) -> dict[str, Any]:
    kwargs["ran"].update(benchmark="buckets", with_buckets={"samples_per_s": 2.0})
    signal.raise_signal(signal.SIGINT)
    await asyncio.sleep(3600)
    raise AssertionError("unreachable")


@pytest.fixture(autouse=True)
def _quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench_cli, "setup_logging", lambda *_: None)


@pytest.mark.parametrize(
    ("command", "module", "name", "fake", "phase", "figures", "not_run"),
    [
        pytest.param(
            "throughput", throughput, "bench_throughput", _interrupted_after_raw,
            "raw_engine", {"samples_per_s": 1.0}, "saturation", id="throughput",
        ),
        pytest.param(
            "buckets", buckets, "bench_buckets", _interrupted_after_one_variant,
            "with_buckets", {"samples_per_s": 2.0}, "one_bucket", id="buckets",
        ),
    ],
)  # fmt: skip
def test_ctrl_c_writes_the_phases_that_ran_and_exits_130(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    command: str,
    module: Any,
    name: str,
    fake: Any,
    phase: str,
    figures: dict[str, float],
    not_run: str,
) -> None:
    monkeypatch.setattr(module, name, fake)
    out = tmp_path / "r.json"

    result = CliRunner().invoke(app, ["bench", command, "--json", str(out)])

    assert result.exit_code == 130, result.output
    report = json.loads(out.read_text())
    assert report[phase] == figures
    assert not_run not in report
    assert report["interrupted"].startswith(f"Ctrl-C; phases measured in full: {phase}")
    assert f"interrupted (Ctrl-C) after: {phase}" in result.output

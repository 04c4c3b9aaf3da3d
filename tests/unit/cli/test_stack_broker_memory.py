"""`inferbus up` says what the embedded broker holds in memory: Tansu keeps every record."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from services.cli import stack
from services.cli.stack import Stack, status_table
from tests.unit.cli.stacks import headless_options

GB = 2**30


def _stack(tmp_path: Path) -> Stack:
    made = Stack(headless_options(tmp_path))
    made.console = Console(file=io.StringIO(), width=400)
    return made


def test_up_warns_as_the_broker_grows_and_not_again_for_the_same_share(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = _stack(tmp_path)
    clock = [1000.0]
    rss = [1 * GB]
    monkeypatch.setattr(stack.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(stack, "process_rss_bytes", lambda pid: rss[0])
    monkeypatch.setattr(stack, "available_bytes", lambda: 8 * GB - rss[0])

    def read_at(t_s: float, rss_bytes: int) -> str:
        clock[0], rss[0] = t_s, rss_bytes
        before = made.console.file.getvalue()  # type: ignore[attr-defined]
        made._read_broker_memory(pid=1234)
        return made.console.file.getvalue()[len(before) :]  # type: ignore[attr-defined]

    assert read_at(1000, 1 * GB) == ""  # 12 %
    assert made.broker_rss_bytes == 1 * GB
    assert read_at(1010, 3 * GB) == ""  # read at most every 30 s: not read
    assert made.broker_rss_bytes == 1 * GB
    said = read_at(1120, 3 * GB)  # 37 %: over a quarter, 1 GB a minute since the first read
    assert "holds 3.0 GB in memory, 38% of what this machine has for it" in said
    assert "it grows 1.0 GB a minute, so the rest lasts about 5 min" in said
    assert read_at(1150, int(3.2 * GB)) == ""  # the same share: said once
    assert "50%" in read_at(1180, 4 * GB)


def test_the_live_view_shows_the_brokers_memory() -> None:
    out = Console(file=io.StringIO(), width=200)
    out.print(status_table({}, "127.0.0.1:9092", 5, broker_bytes=int(1.5 * GB)))
    assert "broker 1.5 GB in memory" in out.file.getvalue()  # type: ignore[attr-defined]
    quiet = Console(file=io.StringIO(), width=200)
    quiet.print(status_table({}, "kafka:9092", 5))  # a Kafka of its own: nothing to say
    assert "in memory" not in quiet.file.getvalue()  # type: ignore[attr-defined]

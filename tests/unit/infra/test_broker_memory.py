"""The embedded broker's memory: read from /proc, and warned of as it crosses shares."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from infra.broker_memory import (
    MemorySample,
    available_bytes,
    growth_per_minute,
    memory_warning,
    size,
)
from infra.processes import process_rss_bytes

MB = 2**20
GB = 2**30


@pytest.mark.parametrize(
    ("rss", "available", "warned", "said", "now_warned"),
    [
        (1 * GB, 9 * GB, 0.0, None, 0.0),  # 10 %: nothing yet
        (3 * GB, 7 * GB, 0.0, "30%", 0.25),  # crossed a quarter
        (3 * GB, 7 * GB, 0.25, None, 0.25),  # already said
        (6 * GB, 4 * GB, 0.25, "60%", 0.5),  # the next share
        (9 * GB, 1 * GB, 0.0, "90%", 0.75),  # several crossed at once: said once, the highest
        (9 * GB, 1 * GB, 0.75, None, 0.75),  # nothing above the last share
        (1 * GB, 0, 0.0, "100%", 0.75),  # nothing left at all
        (100 * MB, 100 * MB, 0.0, None, 0.0),  # half, but others filled the machine
    ],
    ids=[
        "under",
        "a-quarter",
        "said-before",
        "a-half",
        "jumped",
        "past-the-last",
        "none-left",
        "small-broker-not-the-cause",
    ],
)
def test_a_warning_once_per_share_crossed(
    rss: int, available: int, warned: float, said: str | None, now_warned: float
) -> None:
    text, warned_after = memory_warning(rss, available, warned, None)
    assert warned_after == now_warned
    if said is None:
        assert text is None
    else:
        assert text is not None
        assert f"{said} of what this machine has for it" in text
        assert "no retention" in text
        assert "--bootstrap" in text


def test_the_warning_says_how_long_the_rest_lasts_at_the_growth_seen() -> None:
    text, _ = memory_warning(3 * GB, 6 * GB, 0.0, 50 * MB)
    assert text is not None
    assert "it grows 50 MB a minute, so the rest lasts about 2 h at this rate" in text
    quiet, _ = memory_warning(3 * GB, 6 * GB, 0.0, -1.0)  # shrinking: no time to run out
    assert quiet is not None
    assert "lasts" not in quiet


@pytest.mark.parametrize(
    ("samples", "expected"),
    [
        ([], None),
        ([(0, 100 * MB)], None),
        ([(0, 100 * MB), (30, 130 * MB)], None),  # under a minute: no rate yet
        ([(0, 100 * MB), (60, 130 * MB), (120, 160 * MB)], 30 * MB),
        ([(0, 200 * MB), (300, 100 * MB)], -20 * MB),
    ],
    ids=["none", "one", "under-a-minute", "steady", "shrinking"],
)
def test_growth_per_minute(samples: list[tuple[float, int]], expected: float | None) -> None:
    got = growth_per_minute([MemorySample(t, rss) for t, rss in samples])
    assert got == (pytest.approx(expected) if expected is not None else None)


def test_reads_rss_and_available_from_proc(tmp_path: Path) -> None:
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "statm").write_text("5000 2560 100 1 0 900 0\n")
    (tmp_path / "meminfo").write_text(
        "MemTotal:       24000000 kB\nMemFree:  1000 kB\nMemAvailable:   2048 kB\n"
    )
    assert process_rss_bytes(42, tmp_path) == 2560 * os.sysconf("SC_PAGE_SIZE")
    assert available_bytes(tmp_path) == 2048 * 1024
    assert process_rss_bytes(43, tmp_path) is None  # gone
    (tmp_path / "meminfo").write_text("MemTotal: 1 kB\n")
    assert available_bytes(tmp_path) is None


def test_this_process_reads_on_this_machine() -> None:
    rss = process_rss_bytes(os.getpid())
    assert rss is not None and rss > 10 * MB
    assert (available_bytes() or 0) > 0


@pytest.mark.parametrize(
    ("n", "text"), [(340 * MB, "340 MB"), (int(1.25 * GB), "1.2 GB"), (3 * GB, "3.0 GB")]
)
def test_size(n: int, text: str) -> None:
    assert size(n) == text

"""The automatic verdict, case by case: wait for data, keep, or roll back by which rule."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from infra.models.config import VerdictConfig
from scaler.rollout.judge import judged_window_s
from scaler.rollout.verdict import judge
from scaler.rollout.windows import VersionStats

CONFIG = VerdictConfig(
    window_s=60,
    min_requests=100,
    max_error_rate_increase=0.02,
    max_p99_ratio=1.5,
    min_p99_increase_ms=10,
)


def stats(requests: int, errors: int = 0, p99_ms: float | None = 20.0) -> VersionStats:
    return VersionStats(requests, errors, p99_ms)


CASES = [
    pytest.param(stats(1000), stats(99, errors=99), "wait", None, id="too-few-canary-results"),
    pytest.param(stats(1000), stats(100), "keep", None, id="same-as-stable"),
    pytest.param(stats(1000, 10), stats(100, 3), "keep", None, id="errors-within-margin"),
    pytest.param(stats(1000, 10), stats(100, 4), "rollback", "error_rate", id="errors-over"),
    pytest.param(stats(1000, 100), stats(100, 12), "keep", None, id="stable-bad-too"),
    pytest.param(stats(10), stats(100, 3), "rollback", "error_rate", id="no-stable-baseline"),
    pytest.param(stats(10), stats(100, 2), "keep", None, id="no-baseline-within-margin"),
    pytest.param(stats(1000), stats(100, p99_ms=30), "keep", None, id="p99-at-ratio"),
    pytest.param(
        stats(1000), stats(100, p99_ms=30.5), "rollback", "p99", id="p99-over-ratio-and-slack"
    ),
    pytest.param(
        stats(1000, p99_ms=4), stats(100, p99_ms=13), "keep", None, id="p99-ratio-but-noise"
    ),
    pytest.param(
        stats(1000, p99_ms=4), stats(100, p99_ms=14.5), "rollback", "p99", id="p99-over-slack"
    ),
    pytest.param(stats(10, p99_ms=5), stats(100, p99_ms=500), "keep", None, id="p99-no-base"),
    pytest.param(stats(1000), stats(100, p99_ms=None), "keep", None, id="canary-all-failed-p99"),
    pytest.param(
        stats(1000, p99_ms=20),
        stats(100, 50, p99_ms=900),
        "rollback",
        "error_rate",
        id="errors-decide-first",
    ),
]


@pytest.mark.parametrize(("stable", "canary", "action", "rule"), CASES)
def test_verdict(stable: VersionStats, canary: VersionStats, action: str, rule: str | None) -> None:
    verdict = judge(stable, canary, CONFIG)
    assert (verdict.action, verdict.rule) == (action, rule)


def test_a_rollback_says_its_numbers() -> None:
    verdict = judge(stats(1000, 10, p99_ms=20), stats(200, 30, p99_ms=25), CONFIG)
    assert verdict.action == "rollback"
    assert "15.00% (30/200)" in verdict.reason
    assert "1.00%" in verdict.reason and "2.00%" in verdict.reason

    verdict = judge(stats(1000, p99_ms=20), stats(200, p99_ms=80), CONFIG)
    assert "80 ms is 4.00x stable's 20 ms" in verdict.reason
    assert "limit 30 ms" in verdict.reason


def test_waiting_says_how_many_results_are_missing() -> None:
    verdict = judge(stats(1000), stats(42), CONFIG)
    assert verdict.reason == "canary has 42 of 100 results needed"


def test_error_rate_of_no_results_is_zero() -> None:
    assert VersionStats(0, 0, None).error_rate == 0.0


SLOW = (stats(500), stats(50, p99_ms=200))
"""A half where the canary's p99 is 10x stable's."""
CALM = (stats(500), stats(50, p99_ms=21))
FEW = (stats(500), stats(10, p99_ms=21))


@pytest.mark.parametrize(
    ("halves", "action"),
    [
        pytest.param((SLOW, SLOW), "rollback", id="slow-all-along"),
        pytest.param((CALM, SLOW), "keep", id="a-restart-in-the-newer-half"),
        pytest.param((SLOW, CALM), "keep", id="a-restart-in-the-older-half"),
        pytest.param((FEW, SLOW), "rollback", id="a-half-of-too-few-results-cannot-excuse"),
        pytest.param(None, "rollback", id="no-halves-known"),
    ],
)
def test_a_p99_breach_in_one_half_of_the_window_is_a_moment_not_the_version(
    halves: Any, action: str
) -> None:
    """A healthy canary whose worker crashed was rolled back for the queue the restart left
    (p99 2.2x stable's, no errors)."""
    verdict = judge(stats(1000), stats(100, p99_ms=190), CONFIG, halves=halves)
    assert verdict.action == action, verdict.reason
    if action == "keep":
        assert "a moment's delay" in verdict.reason and "half" in verdict.reason


def test_a_p99_of_too_few_results_is_not_compared() -> None:
    """A canary identical to stable was rolled back on 21 results: their "p99" is the
    slowest one."""
    few = VerdictConfig(window_s=30, min_requests=20)
    verdict = judge(stats(1000), stats(21, p99_ms=159), few)
    assert verdict.action == "keep", verdict.reason


@pytest.mark.parametrize(
    ("decided_ago_s", "window_s"),
    [
        pytest.param(None, 300.0, id="no-decision"),
        pytest.param(1.0, 1.0, id="a-share-given-just-now"),
        pytest.param(600.0, 300.0, id="an-old-decision"),
        pytest.param(-5.0, 0.0, id="a-decision-stamped-ahead"),
    ],
)
def test_a_verdict_reads_no_results_from_before_the_decision_in_force(
    decided_ago_s: float | None, window_s: float
) -> None:
    """A share given right after a rollback was rolled back a second later, on the results
    the first verdict had judged."""
    now_s = 1_000_000.0
    decided = None if decided_ago_s is None else datetime.fromtimestamp(now_s - decided_ago_s, UTC)
    assert judged_window_s(300.0, decided, now_s) == window_s

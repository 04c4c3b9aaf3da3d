"""The automatic verdict on a canary: worse than stable by a configured margin, or not (pure)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from infra.models.config import VerdictConfig
from scaler.rollout.windows import VersionStats

Action = Literal["wait", "keep", "rollback"]


@dataclass(frozen=True)
class Verdict:
    """What to do with a canary, the rule that decided, and why in words with the numbers."""

    action: Action
    reason: str
    rule: Literal["error_rate", "p99"] | None = None


P99_MIN_RESULTS = 100
"""Results each side needs before p99s are compared: of fewer, the "p99" is the slowest one
(a canary identical to stable was rolled back on 21 results, its p99 1.86x stable's)."""

Halves = tuple[tuple[VersionStats, VersionStats], tuple[VersionStats, VersionStats]]
"""(stable, canary) over the window's older half, then over its newer half."""


def judge(
    stable: VersionStats,
    canary: VersionStats,
    config: VerdictConfig,
    *,
    halves: Halves | None = None,
) -> Verdict:
    """Compare the canary's window with stable's.

    - fewer than `min_requests` canary results: wait (no verdict on a handful);
    - error rate above stable's by more than `max_error_rate_increase`: roll back (stable
      with fewer than `min_requests` results counts as error-free: the canary must then be
      within the margin on its own);
    - p99 above stable's times `max_p99_ratio` and by more than `min_p99_increase_ms`: roll
      back (only when both have a p99, stable has `min_requests` results and each side
      `P99_MIN_RESULTS`), unless one
      half of the window (`halves`) with half the results needed each is within those
      margins: a slow version is slow all along, while a moment's delay (a canary worker
      that crashed and was replaced held its queue for seconds) breaches one half;
    - otherwise keep.
    """
    if canary.requests < config.min_requests:
        return Verdict(
            "wait", f"canary has {canary.requests} of {config.min_requests} results needed"
        )
    stable_known = stable.requests >= config.min_requests
    baseline = stable.error_rate if stable_known else 0.0
    increase = canary.error_rate - baseline
    if increase > config.max_error_rate_increase:
        against = "stable's" if stable_known else "0 (stable has too few results)"
        return Verdict(
            "rollback",
            f"canary error rate {canary.error_rate:.2%} ({canary.errors}/{canary.requests}) "
            f"is {increase:.2%} above {against} {baseline:.2%}, more than the allowed "
            f"{config.max_error_rate_increase:.2%}",
            "error_rate",
        )
    quantile_known = min(canary.requests, stable.requests) >= P99_MIN_RESULTS
    if stable_known and quantile_known and canary.p99_ms is not None and stable.p99_ms is not None:
        limit = _p99_limit(stable.p99_ms, config)
        if canary.p99_ms > limit:
            calm = _calm_half(halves, config)
            if calm is not None:
                return Verdict(
                    "keep",
                    f"canary p99 {canary.p99_ms:.0f} ms over the window is above stable's "
                    f"{stable.p99_ms:.0f} ms by more than the margins, but within them in "
                    f"its {calm}: a moment's delay (a restart, a rebalance), not the version",
                )
            return Verdict(
                "rollback",
                f"canary p99 {canary.p99_ms:.0f} ms is {canary.p99_ms / stable.p99_ms:.2f}x "
                f"stable's {stable.p99_ms:.0f} ms, over the limit {limit:.0f} ms (x"
                f"{config.max_p99_ratio:g}, at least +{config.min_p99_increase_ms:g} ms)",
                "p99",
            )
    return Verdict(
        "keep",
        f"canary within margins: error rate {canary.error_rate:.2%} vs {baseline:.2%}, p99 "
        f"{_ms(canary.p99_ms)} vs {_ms(stable.p99_ms)} over {canary.requests} results",
    )


def _p99_limit(stable_p99_ms: float, config: VerdictConfig) -> float:
    return max(stable_p99_ms * config.max_p99_ratio, stable_p99_ms + config.min_p99_increase_ms)


def _calm_half(halves: Halves | None, config: VerdictConfig) -> str | None:
    """The half of the window (`older half` or `newer half`) with enough results on both
    sides where the canary's p99 is within the margins; None if there is none."""
    needed = max(1, config.min_requests // 2)
    for name, (stable, canary) in zip(("older half", "newer half"), halves or (), strict=False):
        known = stable.requests >= needed and canary.requests >= needed
        if not known or stable.p99_ms is None or canary.p99_ms is None:
            continue
        if canary.p99_ms <= _p99_limit(stable.p99_ms, config):
            return f"{name} ({canary.p99_ms:.0f} ms against {stable.p99_ms:.0f} ms)"
    return None


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} ms"

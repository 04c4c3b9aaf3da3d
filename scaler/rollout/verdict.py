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


def judge(stable: VersionStats, canary: VersionStats, config: VerdictConfig) -> Verdict:
    """Compare the canary's window with stable's.

    - fewer than `min_requests` canary results: wait (no verdict on a handful);
    - error rate above stable's by more than `max_error_rate_increase`: roll back (stable
      with fewer than `min_requests` results counts as error-free: the canary must then be
      within the margin on its own);
    - p99 above stable's times `max_p99_ratio` and by more than `min_p99_increase_ms`: roll
      back (only when both have a p99 and stable has `min_requests` results);
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
    if stable_known and canary.p99_ms is not None and stable.p99_ms is not None:
        limit = max(
            stable.p99_ms * config.max_p99_ratio, stable.p99_ms + config.min_p99_increase_ms
        )
        if canary.p99_ms > limit:
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


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} ms"

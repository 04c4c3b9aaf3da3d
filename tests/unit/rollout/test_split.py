"""The canary split: the same key always lands on the same side, and the canary's share is
close to the configured one."""

from __future__ import annotations

import pytest

from infra.rollout.split import lane_for, split_point


@pytest.mark.parametrize("share", [0.01, 0.05, 0.1, 0.5, 0.9])
def test_the_split_is_close_to_the_share(share: float) -> None:
    keys = [f"r-{i}" for i in range(20_000)]
    canary = sum(lane_for("demo-mlp", key, share) == "canary" for key in keys)
    # Binomial: 4 standard deviations of 20 000 draws at p=0.5 is 1.4 points.
    assert abs(canary / len(keys) - share) < 0.015


def test_a_key_always_lands_on_the_same_side() -> None:
    first = [lane_for("demo-mlp", f"r-{i}", 0.3) for i in range(1000)]
    again = [lane_for("demo-mlp", f"r-{i}", 0.3) for i in range(1000)]
    assert first == again


def test_the_hash_is_fixed_across_processes_and_releases() -> None:
    """BLAKE2b-64 of `<model>/<key>`: a producer in another language can compute it."""
    assert split_point("demo-mlp", "r-1") == pytest.approx(0.6362301336100218, abs=1e-12)
    assert lane_for("demo-mlp", "r-1", 0.64) == "canary"
    assert lane_for("demo-mlp", "r-1", 0.63) == "stable"


def test_raising_the_share_only_moves_keys_to_the_canary() -> None:
    keys = [f"r-{i}" for i in range(5000)]
    low = {k for k in keys if lane_for("m", k, 0.05) == "canary"}
    high = {k for k in keys if lane_for("m", k, 0.25) == "canary"}
    assert low < high


@pytest.mark.parametrize(("share", "lane"), [(0.0, "stable"), (1.0, "canary")])
def test_the_ends_of_the_share(share: float, lane: str) -> None:
    assert {lane_for("m", f"k-{i}", share) for i in range(500)} == {lane}


def test_models_split_the_same_keys_differently() -> None:
    """With `key: tenant` the same tenants are not every model's canary at once."""
    tenants = [f"team-{i}" for i in range(2000)]
    a = {t for t in tenants if lane_for("model-a", t, 0.1) == "canary"}
    b = {t for t in tenants if lane_for("model-b", t, 0.1) == "canary"}
    assert len(a & b) < 0.3 * len(a)

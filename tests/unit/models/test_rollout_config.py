"""model.yaml `rollout`: every bad setting is refused with a message naming it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from infra.models.config import ModelConfig, ModelConfigError
from tests.model_yaml import write_sim_model

GOOD = {"stable": "1", "canary": "2", "share": 0.1}


CASES = [
    pytest.param({**GOOD, "share": 1.5}, "rollout.share: Input should be less than", id="share>1"),
    pytest.param({**GOOD, "share": -0.1}, "rollout.share: Input should be greater", id="share<0"),
    pytest.param({**GOOD, "share": "most"}, "rollout.share", id="share-not-a-number"),
    pytest.param(
        {**GOOD, "share": float("nan")}, "rollout.share: Input should be a finite", id="share-nan"
    ),
    pytest.param({**GOOD, "canary": "1"}, "rollout.canary '1' is rollout.stable", id="same"),
    pytest.param({**GOOD, "canary": "3"}, "rollout.canary: version folder '3'", id="no-canary"),
    pytest.param({**GOOD, "stable": "0"}, "rollout.stable: version folder '0'", id="no-stable"),
    pytest.param({"stable": "1", "share": 0.2}, "rollout.share 0.2 needs", id="share-no-canary"),
    pytest.param({**GOOD, "key": "ip"}, "rollout.key", id="unknown-key"),
    pytest.param({**GOOD, "canary": "../x"}, "rollout.canary: String should match", id="path"),
    pytest.param({"canary": "2"}, "rollout.stable: Field required", id="no-stable-named"),
    pytest.param(
        {**GOOD, "verdict": {"max_p99_ratio": 0.5}}, "rollout.verdict.max_p99_ratio", id="ratio<1"
    ),
    pytest.param(
        {**GOOD, "verdict": {"window_s": 0}}, "rollout.verdict.window_s", id="window-zero"
    ),
    pytest.param(
        {**GOOD, "verdict": {"min_requests": 0}}, "rollout.verdict.min_requests", id="min-req"
    ),
    pytest.param(
        {**GOOD, "verdict": {"max_error_rate_increase": 2}},
        "rollout.verdict.max_error_rate_increase",
        id="error-margin>1",
    ),
    pytest.param({**GOOD, "surprise": 1}, "rollout.surprise", id="unknown-field"),
]


@pytest.mark.parametrize(("rollout", "message"), CASES)
def test_a_bad_rollout_is_refused_naming_the_setting(
    tmp_path: Path, rollout: Any, message: str
) -> None:
    path = write_sim_model(tmp_path, rollout=rollout)
    with pytest.raises(ModelConfigError) as caught:
        ModelConfig.load(path)
    assert message in str(caught.value)
    assert str(path) in str(caught.value)


def test_a_missing_version_folder_lists_the_ones_there(tmp_path: Path) -> None:
    path = write_sim_model(
        tmp_path, rollout={**GOOD, "canary": "7"}, versions=("1", "2", ".staging")
    )
    with pytest.raises(ModelConfigError, match=r"\(have: 1, 2\)"):
        ModelConfig.load(path)


@pytest.mark.parametrize(
    ("rollout", "canary", "share"),
    [
        pytest.param(GOOD, "2", 0.1, id="canary"),
        pytest.param({"stable": "2"}, None, 0.0, id="stable-pin-only"),
        pytest.param({**GOOD, "share": 0}, "2", 0.0, id="canary-without-traffic"),
        pytest.param(None, None, None, id="no-rollout"),
    ],
)
def test_a_good_rollout_loads(
    tmp_path: Path, rollout: Any, canary: str | None, share: float | None
) -> None:
    config = ModelConfig.load(write_sim_model(tmp_path, rollout=rollout))
    if rollout is None:
        assert config.rollout is None
        return
    assert config.rollout is not None
    assert (config.rollout.canary, config.rollout.share) == (canary, share)
    assert config.rollout.verdict.window_s == 300


def test_the_verdict_defaults_are_documented_numbers(tmp_path: Path) -> None:
    config = ModelConfig.load(write_sim_model(tmp_path, rollout=GOOD))
    assert config.rollout is not None
    verdict = config.rollout.verdict
    assert (
        verdict.window_s,
        verdict.min_requests,
        verdict.max_error_rate_increase,
        verdict.max_p99_ratio,
        verdict.min_p99_increase_ms,
    ) == (300, 100, 0.01, 1.5, 10)
    assert config.rollout.key == "request_id"

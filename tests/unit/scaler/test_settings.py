"""The scaler's settings name only what exists: a policy or actuator typo is refused at start."""

from __future__ import annotations

from typing import get_args

import pytest
from pydantic import ValidationError

from scaler.policy import POLICIES
from scaler.settings import ScalerSettings


def test_the_policy_setting_lists_exactly_the_policies() -> None:
    assert set(get_args(ScalerSettings.model_fields["policy"].annotation)) == set(POLICIES)


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        pytest.param("INFERBUS_SCALER_POLICY", "nope", id="policy"),
        pytest.param("INFERBUS_SCALER_ACTUATOR", "docker", id="actuator"),
    ],
)
def test_an_unknown_name_is_refused(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    """`inferbus up` started the broker, then failed with a ValueError traceback."""
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValidationError, match="Input should be"):
        ScalerSettings()

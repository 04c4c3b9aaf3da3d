"""`inferbus up` lets one busy group use every core, the others at their floor, unless told
otherwise."""

from __future__ import annotations

import pytest

from services.cli.stack import local_worker_budget


@pytest.mark.parametrize(
    ("requested", "cores", "started", "budget"),
    [
        pytest.param(None, 2, 3, 4, id="one-model-three-tiers-one-group-on-both-cores"),
        pytest.param(None, 2, 6, 7, id="two-models"),
        pytest.param(None, 16, 6, 21, id="one-group-on-every-core-the-rest-at-their-floor"),
        pytest.param(None, 1, 3, 3, id="one-core-nothing-beyond-the-floors"),
        pytest.param(4, 16, 6, 4, id="the-setting-wins"),
        pytest.param(0, 2, 6, 0, id="zero-is-a-setting-not-unset"),
    ],
)
def test_local_worker_budget(requested: int | None, cores: int, started: int, budget: int) -> None:
    assert local_worker_budget(requested, cores, started) == budget

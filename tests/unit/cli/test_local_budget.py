"""`inferbus up` caps its scaler at this machine's cores unless told otherwise."""

from __future__ import annotations

import pytest

from services.cli.stack import local_worker_budget


@pytest.mark.parametrize(
    ("requested", "cores", "started", "budget"),
    [
        pytest.param(None, 2, 6, 6, id="never-below-the-workers-started"),
        pytest.param(None, 16, 6, 16, id="the-cores-when-more"),
        pytest.param(4, 16, 6, 4, id="the-setting-wins"),
        pytest.param(0, 2, 6, 0, id="zero-is-a-setting-not-unset"),
    ],
)
def test_local_worker_budget(requested: int | None, cores: int, started: int, budget: int) -> None:
    assert local_worker_budget(requested, cores, started) == budget

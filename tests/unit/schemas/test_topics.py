"""The one reading of a comma list of tiers that every `--tiers` flag shares."""

from __future__ import annotations

import pytest

from schemas.topics import parse_tiers


@pytest.mark.parametrize(
    ("value", "tiers"),
    [
        pytest.param("interactive", ["interactive"], id="one"),
        pytest.param("batch, critical", ["batch", "critical"], id="the-order-given"),
        pytest.param("critical,interactive,batch,", ["critical", "interactive", "batch"], id="all"),
    ],
)
def test_a_list_of_distinct_tiers_is_read_in_its_order(value: str, tiers: list[str]) -> None:
    assert parse_tiers(value) == tiers


@pytest.mark.parametrize(
    ("value", "why"),
    [
        pytest.param("", "names no tier (tiers: critical, interactive, batch)", id="empty"),
        pytest.param(" , ", "names no tier", id="only-commas"),
        pytest.param("gold,batch", "names 'gold', not a tier (tiers: critical,", id="unknown"),
        pytest.param("Batch", "names 'Batch', not a tier", id="case-matters"),
        pytest.param("batch,interactive,batch", "names batch more than once", id="twice"),
    ],
)
def test_a_list_that_is_not_one_says_why(value: str, why: str) -> None:
    with pytest.raises(ValueError, match=r"^names") as raised:
        parse_tiers(value)
    assert why in str(raised.value)

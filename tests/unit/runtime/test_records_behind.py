"""Records written behind a consumer's position (a broker that lost its logs) are found."""

from __future__ import annotations

import pytest
from aiokafka import TopicPartition

from services.runtime.consumer import records_behind

TP = TopicPartition("inferbus.req.demo-mlp.interactive", 10)
BEGINNING = -1
"""Stands for `None` in the seeks: read the log from its beginning."""


@pytest.mark.parametrize(
    ("at_rest", "end", "position", "delivered", "seek", "rest"),
    [
        pytest.param(None, 5, 5, False, None, 5, id="first-sight-is-the-baseline"),
        pytest.param(5, 5, 5, False, None, 5, id="nothing-new"),
        pytest.param(None, 10, 55, False, None, 10, id="first-sight-past-the-end-waits"),
        pytest.param(5, 7, 7, False, None, 7, id="new-records-at-our-position"),
        pytest.param(5, 9, 7, False, None, 9, id="new-records-ahead-of-us-are-lag"),
        pytest.param(25, 29, 103, False, 25, None, id="new-records-behind-us"),
        pytest.param(25, 29, 103, True, None, None, id="records-came-no-verdict"),
        pytest.param(4, 5, 6, True, None, None, id="a-stale-end-after-a-fetch"),
        pytest.param(500, 3, 501, False, BEGINNING, None, id="a-log-that-started-over"),
        pytest.param(10, 10, 14, False, None, 10, id="inside-a-last-batch-of-many"),
    ],
)
def test_records_behind(
    at_rest: int | None,
    end: int,
    position: int,
    delivered: bool,
    seek: int | None,
    rest: int | None,
) -> None:
    seeks, now_at_rest = records_behind(
        {TP: at_rest} if at_rest is not None else {},
        {TP: end},
        {TP: position},
        {TP} if delivered else set(),
    )
    expected = {TP: None if seek == BEGINNING else seek} if seek is not None else {}
    assert seeks == expected
    assert now_at_rest == ({TP: rest} if rest is not None else {})

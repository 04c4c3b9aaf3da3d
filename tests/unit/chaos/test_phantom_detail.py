"""The broker-restart scenario says where its plain producer's losses were lost."""

from __future__ import annotations

import pytest

from services.chaos.scenarios.broker_restart import phantom_detail


@pytest.mark.parametrize(
    ("lost", "readable", "last_loss_s", "expected"),
    [
        (0, set(), None, "none lost"),
        (3, set(), 1.5, "3 lost, none of them ever readable on the ingest topic; last sent 1.5"),
        (3, {"r2", "r1"}, 4.0, "2 of 3 lost were readable on the ingest topic: r1, r2; last"),
        (2, {"r1"}, None, "1 of 2 lost were readable on the ingest topic: r1"),
    ],
    ids=["none", "all-phantom", "some-readable", "no-send-time"],
)
def test_phantom_detail_says_how_many_losses_were_readable(
    lost: int, readable: set[str], last_loss_s: float | None, expected: str
) -> None:
    assert phantom_detail(lost, readable, last_loss_s).startswith(expected)

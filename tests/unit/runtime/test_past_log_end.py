"""A position past a log's reported end is past the log only if the last batch says so
(Tansu reports the last batch's first offset + 1)."""

from __future__ import annotations

import pytest

from infra.log_end import past_log_end


@pytest.mark.parametrize(
    ("position", "reported_end", "highest_seen", "past"),
    [
        pytest.param(14, 10, 13, False, id="inside-a-last-batch-of-five"),
        pytest.param(55, 10, 9, True, id="an-earlier-logs-position"),
        pytest.param(55, 10, None, False, id="nothing-read-not-known"),
        pytest.param(3, 0, None, True, id="an-empty-log"),
        pytest.param(0, 0, None, False, id="an-empty-log-at-its-start"),
        pytest.param(10, 10, 9, False, id="at-the-end"),
        pytest.param(11, 10, 9, True, id="one-past-the-end"),
    ],
)
def test_past_log_end(
    position: int, reported_end: int, highest_seen: int | None, past: bool
) -> None:
    assert past_log_end(position, reported_end, highest_seen) is past

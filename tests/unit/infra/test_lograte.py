"""A repeating log line is written a few times per window, then counted."""

from __future__ import annotations

import logging

import pytest

from infra.lograte import RateLimitFilter, limit_logger_rate


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def line(msg: str, name: str = "inferbus.worker") -> logging.LogRecord:
    return logging.LogRecord(name, logging.WARNING, __file__, 1, msg, None, None)


def test_a_repeating_line_is_held_back_after_its_burst_and_counted_in_the_next_window() -> None:
    clock = Clock()
    limiter = RateLimitFilter(burst=3, window_s=10.0, clock=clock)
    passed = [limiter.filter(line("event=commit_failed error=%r")) for _ in range(100)]
    assert passed.count(True) == 3 and passed[:3] == [True] * 3
    clock.now = 10.0
    record = line("event=commit_failed error=%r")
    assert limiter.filter(record)
    assert record.msg.endswith("[97 more like this held back]")


def test_distinct_templates_and_loggers_are_limited_apart() -> None:
    limiter = RateLimitFilter(burst=1, window_s=10.0, clock=Clock())
    assert limiter.filter(line("event=a"))
    assert not limiter.filter(line("event=a"))
    assert limiter.filter(line("event=b"))
    assert limiter.filter(line("event=a", name="aiokafka"))


def test_keys_are_bounded() -> None:
    limiter = RateLimitFilter(burst=1, window_s=10.0, clock=Clock(), max_keys=5)
    for i in range(50):
        assert limiter.filter(line(f"poison {i}"))
    assert len(limiter._windows) <= 5


def test_a_librarys_loggers_hold_back_repeats_without_touching_the_apps_handlers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The client's aiokafka logged every failed reconnect, ~10 lines a second."""
    child = logging.getLogger("somelib-under-test.conn")
    limit_logger_rate("somelib-under-test", burst=3, window_s=60.0)
    limit_logger_rate("somelib-under-test", burst=3, window_s=60.0)  # idempotent
    with caplog.at_level(logging.WARNING):
        for _ in range(50):
            child.warning("Unable connect to node with id %s", 0)
        logging.getLogger("an-app").warning("the app's own line")
    lines = [r for r in caplog.records if r.name == "somelib-under-test.conn"]
    assert len(lines) == 3
    assert any(r.name == "an-app" for r in caplog.records)

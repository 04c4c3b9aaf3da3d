"""The scale-step watcher: what it counts instead of dropping, and a kill that misses."""

from __future__ import annotations

import subprocess
import sys

from infra.topics import BROKER_EVENT_KEY
from services.bench.step_watch import TopicWatch, kill


async def test_a_registry_record_that_does_not_decode_is_counted() -> None:
    watch = TopicWatch("127.0.0.1:1", topic="inferbus.req.m.interactive", group="g")
    watch._registry(BROKER_EVENT_KEY, b'{"event": "broker_back"}')  # the broker's own note
    assert watch.invalid_registry == 0
    watch._registry(b"worker-1", b"not a registry record")
    assert watch.invalid_registry == 1
    assert watch.registry == []


def test_kill_says_whether_the_signal_landed() -> None:
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert kill(live.pid) is True
    finally:
        live.wait(timeout=10)
    assert kill(live.pid) is False  # reaped: nothing to kill any more

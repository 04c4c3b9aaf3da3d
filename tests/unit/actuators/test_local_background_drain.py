"""LocalActuator(drain_in_background=True): a scale-down returns before a slow drain ends."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from scaler.actuators.local import LocalActuator
from tests.unit.actuators.test_local import FAKE_WORKER, GROUP, alive, wait_ready


async def test_scale_down_does_not_wait_for_the_drain(tmp_path: Path) -> None:
    # A stubborn worker ignores SIGTERM: its drain lasts the whole grace period.
    local = LocalActuator(
        "127.0.0.1:9092",
        tmp_path / "models",
        command=[sys.executable, "-c", FAKE_WORKER],
        env={"READY_DIR": str(tmp_path), "STUBBORN": "1"},
        grace_s=2.0,
        kill_after_s=0.2,
        drain_in_background=True,
    )
    try:
        await local.scale(GROUP, 2, "up")
        pids = local.pids(GROUP)
        await wait_ready(tmp_path, pids)
        started = time.monotonic()
        await local.scale(GROUP, 1, "down")
        assert time.monotonic() - started < 1.0, "the scale-down waited for the drain"
        assert await local.current(GROUP) == 1
        assert alive(pids[1]), "still draining"
    finally:
        await asyncio.wait_for(local.close(), timeout=10)
    assert not any(alive(pid) for pid in pids), "close() awaits the drains still running"

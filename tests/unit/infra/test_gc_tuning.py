"""Services tune garbage collection before they serve; tried in a fresh interpreter, since
freezing would change the test process itself."""

from __future__ import annotations

import json
import subprocess
import sys

from infra.gc_tuning import MIDDLE_EVERY, OLD_EVERY, YOUNG_THRESHOLD

SERVICE = """
import asyncio, gc, json
from services.cli.common import run_service

async def serve():
    await asyncio.sleep(0)
    return {"thresholds": gc.get_threshold(), "frozen": gc.get_freeze_count()}

print(json.dumps(run_service(serve())))
"""

CLIENT = """
import asyncio, gc, json
from services.cli.common import run

before = gc.get_threshold()
frozen_before = gc.get_freeze_count()  # 375 at start on 3.12.1, 0 on 3.11 and 3.13

async def call():
    return {
        "thresholds": gc.get_threshold(),
        "frozen": gc.get_freeze_count(),
        "before": before,
        "frozen_before": frozen_before,
    }

print(json.dumps(run(call())))
"""


def _state(program: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=True
    )
    state: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return state


def test_a_service_runs_frozen_with_rarer_collections() -> None:
    state = _state(SERVICE)
    assert state["thresholds"] == [YOUNG_THRESHOLD, MIDDLE_EVERY, OLD_EVERY]
    assert isinstance(state["frozen"], int) and state["frozen"] > 1000


def test_other_commands_keep_cpythons_defaults() -> None:
    state = _state(CLIENT)
    assert state["thresholds"] == state["before"]
    assert state["frozen"] == state["frozen_before"]

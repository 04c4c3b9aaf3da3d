"""The forced stop: every tracked child's process group is SIGKILLed, and only those."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from infra.processes import (
    ChildProcess,
    SupervisedGroup,
    forget_child,
    kill_children,
    track_child,
)

SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]
# A child that starts a grandchild in its own (the child's) process group, then sleeps.
WITH_GRANDCHILD = [
    sys.executable,
    "-c",
    "import subprocess, sys, time; "
    "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
    "print(g.pid, flush=True); time.sleep(60)",
]


def _alive(pid: int) -> bool:
    """Running: a zombie (killed, not reaped yet) or a gone pid is not."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups, prctl")
def test_kill_children_kills_each_group_and_forgets_them() -> None:
    kill_children()  # nothing left from elsewhere in this process
    one = ChildProcess("one", SLEEP)
    parent = subprocess.Popen(WITH_GRANDCHILD, stdout=subprocess.PIPE, process_group=0)
    track_child(parent.pid)
    one.start()
    assert parent.stdout is not None
    grandchild = int(parent.stdout.readline())
    stopped = ChildProcess("stopped", SLEEP)
    stopped.start()
    stopped.stop(timeout_s=5)  # stopped in order: forgotten, not signalled again
    try:
        signalled = kill_children()
        assert sorted(signalled) == sorted([one.pid, parent.pid])
        assert one.process is not None and one.process.wait(timeout=5) == -9
        assert parent.wait(timeout=5) == -9
        deadline = time.monotonic() + 5
        while _alive(grandchild) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(grandchild)  # killed with its group
        assert kill_children() == []  # forgotten once killed
    finally:
        for process in (one.process, parent):
            if process is not None and process.poll() is None:
                process.kill()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups, prctl")
def test_a_child_found_dead_is_forgotten() -> None:
    kill_children()
    group = SupervisedGroup("g", [sys.executable, "-c", "pass"], 1, backoff_s=(60.0, 60.0))
    group.start()
    [child] = group.children
    assert child.process is not None
    child.process.wait(timeout=10)
    assert group.check() == [child]
    assert kill_children() == []  # its pid may belong to someone else by now
    group.stop()
    forget_child(-1)  # unknown pids are ignored

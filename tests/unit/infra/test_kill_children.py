"""The forced stop: every tracked child's process group is SIGKILLed, and only those."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from infra import processes
from infra.processes import (
    ChildProcess,
    RestartBackoff,
    SupervisedGroup,
    forget_child,
    kill_children,
    track_child,
    tracked_children,
)

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="process groups, /proc"
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


@pytest.fixture(autouse=True)
def _own_registry() -> Iterator[None]:
    """Each test sees only the children it starts; what others track is left alone."""
    saved = set(processes._children)
    processes._children.clear()
    yield
    processes._children.clear()
    processes._children.update(saved)


def _alive(pid: int) -> bool:
    """Running: a zombie (killed, not reaped yet) or a gone pid is not."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def test_kill_children_kills_each_group_and_only_the_running_ones() -> None:
    one = ChildProcess("one", SLEEP)
    parent = subprocess.Popen(WITH_GRANDCHILD, stdout=subprocess.PIPE, process_group=0)
    track_child(parent.pid)
    one.start()
    assert parent.stdout is not None
    grandchild = int(parent.stdout.readline())
    stopped = ChildProcess("stopped", SLEEP)
    stopped.start()
    assert one.pid is not None and stopped.pid is not None
    assert tracked_children() == {one.pid, parent.pid, stopped.pid}
    stopped.stop(timeout_s=5)  # stopped in order: forgotten, not signalled again
    assert tracked_children() == {one.pid, parent.pid}
    try:
        assert sorted(kill_children()) == sorted([one.pid, parent.pid])
        assert one.process is not None and one.process.wait(timeout=5) == -9
        assert parent.wait(timeout=5) == -9
        deadline = time.monotonic() + 5
        while _alive(grandchild) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(grandchild)  # killed with its group
        assert tracked_children() == frozenset()
    finally:
        for process in (one.process, parent):
            if process is not None and process.poll() is None:
                process.kill()


def test_a_child_found_dead_is_forgotten() -> None:
    group = SupervisedGroup("g", [sys.executable, "-c", "pass"], 1, backoff_s=(60.0, 60.0))
    group.start()
    [child] = group.children
    assert child.process is not None and child.pid is not None
    assert tracked_children() == {child.pid}
    child.process.wait(timeout=10)
    assert group.check() == [child]
    assert tracked_children() == frozenset()  # its pid may belong to someone else by now
    group.stop()


def test_a_restarted_child_forgets_its_old_pid() -> None:
    child = ChildProcess("quick", [sys.executable, "-c", "pass"])
    child.start()
    assert child.process is not None
    old = child.process.pid
    child.process.wait(timeout=10)
    child.start()
    try:
        assert child.pid is not None and child.pid != old
        assert tracked_children() == {child.pid}
    finally:
        child.stop(timeout_s=5)
    forget_child(-1)  # unknown pids are ignored
    assert tracked_children() == frozenset()


def test_restart_backoff_doubles_on_exits_and_starts_over_after_a_clean_run() -> None:
    backoff = RestartBackoff(first_s=1.0, most_s=4.0, healthy_after_s=10.0)
    waits = []
    for now in (0.0, 10.0, 20.0, 30.0):  # an exit found in each round
        backoff.settle(True, [], now)
        waits.append(backoff.next_at - now)
    assert waits == [1.0, 2.0, 4.0, 4.0]
    assert backoff.waiting(33.0) and not backoff.waiting(34.0)
    backoff.settle(False, [35.0], 40.0)  # running 5 s: not yet clean
    assert backoff.failures == 4
    backoff.settle(False, [35.0], 45.0)  # every copy ran 10 s
    assert backoff.failures == 0
    backoff.settle(True, [], 50.0)
    assert backoff.next_at == 51.0

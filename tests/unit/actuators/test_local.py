"""The local actuator with a tiny fake worker: spawn, scale up and down, drain, no orphans."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from scaler.actuators.base import ActuatorError
from scaler.actuators.local import LocalActuator, error_line

GROUP = "inferbus.workers.demo-mlp.interactive"

# Writes `<READY_DIR>/<pid>` (with its argv) once its SIGTERM handler is in place, then sleeps.
# STUBBORN=1 ignores SIGTERM and leaves a grandchild in its process group.
FAKE_WORKER = """
import os, signal, subprocess, sys, time
stubborn = os.environ.get("STUBBORN") == "1"
signal.signal(signal.SIGTERM, signal.SIG_IGN if stubborn else lambda *_: sys.exit(0))
extra = ""
if stubborn:
    extra = str(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"]).pid)
path = os.path.join(os.environ["READY_DIR"], str(os.getpid()))
with open(path + ".tmp", "w") as f:
    f.write(" ".join(sys.argv[1:]) + "\\n" + extra)
os.rename(path + ".tmp", path)
while True:
    time.sleep(0.05)
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def wait_ready(ready_dir: Path, pids: list[int], timeout_s: float = 10.0) -> None:
    async def poll() -> None:
        # Another process's state has no asyncio.Event; the poll is bounded by wait_for.
        while not all((ready_dir / str(pid)).exists() for pid in pids):  # noqa: ASYNC110
            await asyncio.sleep(0.02)

    await asyncio.wait_for(poll(), timeout_s)


def actuator(
    tmp_path: Path, stubborn: bool = False, grace_s: float = 5.0, log_dir: Path | None = None
) -> LocalActuator:
    return LocalActuator(
        "127.0.0.1:9092",
        tmp_path / "models",
        command=[sys.executable, "-c", FAKE_WORKER],
        env={"READY_DIR": str(tmp_path), "STUBBORN": "1" if stubborn else "0"},
        grace_s=grace_s,
        kill_after_s=0.5,
        log_dir=log_dir,
    )


async def test_workers_with_log_files_are_counted(tmp_path: Path) -> None:
    """Regression: with a log dir, spawned children were lost from the count (and respawned)."""
    local = actuator(tmp_path, log_dir=tmp_path / "logs")
    try:
        await local.scale(GROUP, 2, "test up")
        assert await local.current(GROUP) == 2
        await local.scale(GROUP, 2, "same again")
        assert await local.current(GROUP) == 2, "no extra worker for a count already met"
        assert len(list((tmp_path / "logs").iterdir())) == 2, "one log file per worker"
    finally:
        await local.close()


async def test_scale_up_down_and_close(tmp_path: Path) -> None:
    local = actuator(tmp_path)
    try:
        assert await local.current(GROUP) == 0
        await local.scale(GROUP, 3, "test up")
        pids = local.pids(GROUP)
        assert await local.current(GROUP) == 3
        await wait_ready(tmp_path, pids)
        argv = (tmp_path / str(pids[0])).read_text().splitlines()[0]
        assert argv == (
            f"--model demo-mlp --tier interactive --bootstrap 127.0.0.1:9092 "
            f"--models {tmp_path / 'models'}"
        )

        await local.scale(GROUP, 1, "test down")
        assert local.pids(GROUP) == [pids[0]], "the newest workers go first"
        assert not alive(pids[1])
        assert not alive(pids[2])
        assert alive(pids[0])
    finally:
        await local.close()
    assert not any(alive(pid) for pid in pids)
    assert await local.current(GROUP) == 0
    await local.close()  # idempotent


async def test_stubborn_worker_is_killed_with_its_children(tmp_path: Path) -> None:
    local = actuator(tmp_path, stubborn=True, grace_s=0.3)
    await local.scale(GROUP, 1, "test")
    (pid,) = local.pids(GROUP)
    await wait_ready(tmp_path, [pid])
    grandchild = int((tmp_path / str(pid)).read_text().splitlines()[1])
    assert alive(grandchild)
    await asyncio.wait_for(local.scale(GROUP, 0, "test"), timeout=10)
    assert not alive(pid)
    # The grandchild is not ours to reap: wait until init has, bounded.
    await asyncio.wait_for(_gone(grandchild), timeout=5)


async def _gone(pid: int) -> None:
    while alive(pid):  # noqa: ASYNC110 - a foreign pid; callers bound this with wait_for
        await asyncio.sleep(0.02)


async def test_atexit_hook_kills_what_close_never_stopped(tmp_path: Path) -> None:
    local = actuator(tmp_path)
    await local.scale(GROUP, 2, "test")
    pids = local.pids(GROUP)
    await wait_ready(tmp_path, pids)
    local._kill_all_now()
    for pid in pids:
        await asyncio.wait_for(_gone(pid), timeout=5)
    await local.close()


async def test_crashed_worker_is_not_counted(tmp_path: Path) -> None:
    local = LocalActuator(
        "b:1", tmp_path, command=[sys.executable, "-c", "raise SystemExit(3)"], grace_s=1
    )
    try:
        await local.scale(GROUP, 1, "test")
        (child,) = local._groups[GROUP].children
        await asyncio.wait_for(child.process.wait(), timeout=10)
        assert await local.current(GROUP) == 0
    finally:
        await local.close()


@pytest.mark.parametrize(
    ("group", "replicas"),
    [
        pytest.param("inferbus.ingest", 1, id="not-a-worker-group"),
        pytest.param("inferbus.workers.m.gold", 1, id="unknown-tier"),
        pytest.param(GROUP, -1, id="negative"),
    ],
)
async def test_rejects_bad_requests(tmp_path: Path, group: str, replicas: int) -> None:
    local = actuator(tmp_path)
    with pytest.raises(ActuatorError):
        await local.scale(group, replicas, "test")
    await local.close()


async def test_missing_command_is_an_actuator_error(tmp_path: Path) -> None:
    local = LocalActuator("b:1", tmp_path, command=[str(tmp_path / "no-such-binary")])
    with pytest.raises(ActuatorError, match="cannot start worker"):
        await local.scale(GROUP, 1, "test")
    await local.close()


async def test_a_worker_that_dies_unasked_is_announced_and_replaced(tmp_path: Path) -> None:
    announced: list[tuple[str, str, int | None]] = []

    async def announce(group: str, instance_id: str, returncode: int | None) -> None:
        announced.append((group, instance_id, returncode))

    local = LocalActuator(
        "127.0.0.1:9092",
        tmp_path / "models",
        command=[sys.executable, "-c", FAKE_WORKER],
        env={"READY_DIR": str(tmp_path), "STUBBORN": "0"},
        announce_exit=announce,
        restart_backoff_s=(0.2, 1.0),
    )
    try:
        await local.scale(GROUP, 2, "test")
        first = local.pids(GROUP)
        await wait_ready(tmp_path, first)
        os.kill(first[0], 9)

        async def replaced() -> None:
            while len(local.pids(GROUP)) < 2 or first[0] in local.pids(GROUP):  # noqa: ASYNC110
                await asyncio.sleep(0.05)

        await asyncio.wait_for(replaced(), 10)
        assert first[1] in local.pids(GROUP), "the survivor is left alone"
        assert local.restarts == 1
        [(group, instance_id, code)] = announced
        assert group == GROUP and code == -9
        assert instance_id.startswith("worker-demo-mlp-interactive-")
    finally:
        await local.close()


async def test_a_worker_that_keeps_dying_is_restarted_with_growing_backoff(tmp_path: Path) -> None:
    local = LocalActuator(
        "127.0.0.1:9092",
        tmp_path / "models",
        command=[sys.executable, "-c", "import sys; sys.exit(3)"],
        restart_backoff_s=(0.3, 5.0),
    )
    try:
        await local.scale(GROUP, 1, "test")
        await asyncio.sleep(2.5)
        # Immediate restarts would be ~5 in 2.5 s; with 0.3, 0.6, 1.2 s backoff at most 3.
        assert 1 <= local.restarts <= 3
    finally:
        await local.close()


def test_a_canary_worker_is_started_on_its_lane(tmp_path: Path) -> None:
    local = actuator(tmp_path)
    stable = local.argv("inferbus.workers.demo-mlp.interactive")
    canary = local.argv("inferbus.workers.demo-mlp.canary.interactive")
    assert "--lane" not in stable
    assert canary == [*stable, "--lane", "canary"]


PORT_WORKER = """
import os, signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
path = os.path.join(os.environ["READY_DIR"], str(os.getpid()))
with open(path + ".tmp", "w") as f:
    f.write(os.environ.get("INFERBUS_WORKER_METRICS_PORT", "unset"))
os.rename(path + ".tmp", path)
while True:
    time.sleep(0.05)
"""


async def test_each_worker_gets_its_own_metrics_port(tmp_path: Path) -> None:
    """Regression: every worker `inferbus up` started got the same port; only one bound it."""
    from infra.broker import free_port

    base = free_port()
    local = LocalActuator(
        "127.0.0.1:9092",
        tmp_path / "models",
        command=[sys.executable, "-c", PORT_WORKER],
        env={"READY_DIR": str(tmp_path), "INFERBUS_WORKER_METRICS_PORT": str(base)},
        kill_after_s=0.5,
    )
    try:
        await local.scale(GROUP, 3, "test up")
        pids = local.pids(GROUP)
        await wait_ready(tmp_path, pids)
        ports = sorted(int((tmp_path / str(pid)).read_text()) for pid in pids)
    finally:
        await local.close()
    assert len(set(ports)) == 3, ports
    assert ports[0] >= base


async def test_a_scaler_asking_every_tick_does_not_bypass_the_backoff(tmp_path: Path) -> None:
    """A canary that cannot load was started again on every scaler tick ('0→1, kept at floor
    1'), every 5 s for minutes, whatever the backoff said."""
    starts = tmp_path / "starts"
    local = LocalActuator(
        "127.0.0.1:9092",
        tmp_path / "models",
        command=[
            sys.executable,
            "-c",
            "import os, sys; open(os.environ['STARTS'], 'a').write('x'); sys.exit(3)",
        ],
        env={"STARTS": str(starts)},
        restart_backoff_s=(0.3, 5.0),
    )
    try:
        for _ in range(10):  # the scaler's ticks, each asking for 1 of a group that has 0
            await local.scale(GROUP, 1, "test")
            await asyncio.sleep(0.25)
        # Backoff 0.3, 0.6, 1.2 s: at most 4 starts in 2.5 s; a start per tick made 10.
        assert 1 <= len(starts.read_text()) <= 4
    finally:
        await local.close()


async def test_a_worker_that_cannot_start_says_why_in_the_scalers_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Regression: a worker that could not load its model restarted with backoff, and `up`
    said only `returncode=1` each time; the reason was in the worker's log file alone."""
    failing = (
        "import sys; print('loading...'); "
        "print('error: model m: version 1 cannot be served: bad graph', file=sys.stderr); "
        "sys.exit(1)"
    )
    local = LocalActuator(
        "127.0.0.1:9092",
        tmp_path / "models",
        command=[sys.executable, "-c", failing],
        log_dir=tmp_path / "logs",
        restart_backoff_s=(5.0, 5.0),
    )
    try:
        with caplog.at_level("WARNING"):
            await local.scale(GROUP, 1, "test")
            (child,) = local._groups[GROUP].children
            await asyncio.wait_for(child.process.wait(), 10)

            async def said() -> None:
                while "event=worker_exited" not in caplog.text:  # noqa: ASYNC110
                    await asyncio.sleep(0.05)

            await asyncio.wait_for(said(), 10)
        assert "returncode=1 why='model m: version 1 cannot be served: bad graph'" in caplog.text
    finally:
        await local.close()


@pytest.mark.parametrize(
    ("text", "why"),
    [
        pytest.param("a\nerror: first\nb\nerror: last one\n", "last one", id="the-last"),
        pytest.param("Traceback ...\nValueError: x\n", None, id="none"),
        pytest.param("", None, id="empty"),
    ],
)
def test_error_line(text: str, why: str | None) -> None:
    assert error_line(text) == why


def _instance_id_in_environment(pid: int) -> str:
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    (line,) = [v for v in environ if v.startswith(b"INFERBUS_WORKER_INSTANCE_ID=")]
    return line.split(b"=", 1)[1].decode()


async def test_own_workers_are_the_ids_the_workers_register_as(tmp_path: Path) -> None:
    """A clean stop hands over the workers by the instance ids they register with
    (`scaler.run.own_workers`): the ids in each child's environment."""
    from scaler.run import own_workers

    local = actuator(tmp_path)
    try:
        await local.scale(GROUP, 2, "test up")
        pids = local.pids(GROUP)
        await wait_ready(tmp_path, pids)
        told = {_instance_id_in_environment(pid) for pid in pids}
        assert own_workers(local) == {GROUP: frozenset(told)}
        assert len(told) == 2
    finally:
        await local.close()
    assert not any(own_workers(local).values())  # closed: none running

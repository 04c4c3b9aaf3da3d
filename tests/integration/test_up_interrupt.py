"""Ctrl-C on `inferbus up` (or `make up`) in a terminal: the terminal sends SIGINT to the
whole foreground process group. The stack must stop in order (workers drain, then ingest,
then the broker) and leave nothing behind; its children live in their own process groups,
so the signal reaches `inferbus up` alone. A second Ctrl-C while it drains stops everything
at once; a second SIGTERM, or a SIGHUP, does not."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

READY_WITHIN_S = 180.0
STOPPED_WITHIN_S = 60.0
FORCED_WITHIN_S = 5.0


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for its new parent to reap it is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _children_of(pid: int) -> list[int]:
    """Every process whose parent is `pid` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid:
            found.append(int(entry.name))
    return found


def _start_up(tmp_path: Path) -> tuple[subprocess.Popen[bytes], Path]:
    """`inferbus up` in its own session (a terminal's group), once every group serves."""
    log = tmp_path / "up.log"
    with log.open("wb") as out:
        up = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "services.cli.main",
                "up",
                "--headless",
                "--tiers",
                "interactive",
                "--models",
                str(tmp_path / "models"),
                "--log-dir",
                str(tmp_path / "logs"),
                "--port",
                "0",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group: the terminal's, as under a shell
        )
    deadline = time.monotonic() + READY_WITHIN_S
    while b"ready: every group has a worker serving" not in log.read_bytes():
        if up.poll() is not None or time.monotonic() >= deadline:
            _kill_all(up)
            pytest.fail(log.read_text()[-3000:])
        time.sleep(0.5)
    return up, log


def _kill_all(up: subprocess.Popen[bytes]) -> None:
    """Each child leads its own process group: kill them there, then `up`'s."""
    for pid in [*_children_of(up.pid), up.pid]:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
    up.wait(timeout=10)  # SIGKILLed: it cannot outlive this


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_sigint_to_the_terminal_group_stops_the_stack_in_order(tmp_path: Path) -> None:
    up, log = _start_up(tmp_path)
    try:
        children = _children_of(up.pid)
        assert len(children) >= 3, children  # broker, ingest, the workers

        os.killpg(up.pid, signal.SIGINT)  # what Ctrl-C does: the whole foreground group
        returncode = up.wait(timeout=STOPPED_WITHIN_S)

        text = log.read_text()
        assert returncode == 0, text[-3000:]
        assert "inferbus stopping: draining workers, ingest, broker" in text
        assert "inferbus stopped" in text
        for path in [log, *sorted((tmp_path / "logs").glob("*.log"))]:
            written = path.read_text(errors="replace")
            for symptom in ("Traceback", "Unclosed AIOKafka"):
                assert symptom not in written, f"{path.name}: {written[-3000:]}"
        left = [pid for pid in children if _alive(pid)]
        assert not left, f"still running after the stack stopped: {left}"
    finally:
        _kill_all(up)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_second_sigint_while_stopping_kills_everything_at_once(tmp_path: Path) -> None:
    up, log = _start_up(tmp_path)
    try:
        children = _children_of(up.pid)
        assert len(children) >= 3, children

        os.killpg(up.pid, signal.SIGINT)
        deadline = time.monotonic() + 10
        while b"inferbus stopping:" not in log.read_bytes():
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.05)
        os.killpg(up.pid, signal.SIGINT)  # Ctrl-C again while the workers drain
        returncode = up.wait(timeout=FORCED_WITHIN_S)

        text = log.read_text()
        assert returncode == 130, text[-3000:]
        assert "stopped at once: killed" in text
        deadline = time.monotonic() + 5
        while any(_alive(pid) for pid in children) and time.monotonic() < deadline:
            time.sleep(0.05)
        left = [pid for pid in children if _alive(pid)]
        assert not left, f"still running after the forced stop: {left}"
    finally:
        _kill_all(up)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_broker_that_dies_under_up_is_started_again_and_serves(tmp_path: Path) -> None:
    """Regression: `up` said nothing, left the dead broker a zombie and repeated its last
    status until Ctrl-C."""
    up, log = _start_up(tmp_path)
    try:
        [broker] = [pid for pid in _children_of(up.pid) if "tansu" in _cmdline(pid)]
        bootstrap = log.read_text().split("memory only) on ", 1)[1].split()[0]

        os.kill(broker, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while b"broker back" not in log.read_bytes():
            assert up.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        x = "[[" + ", ".join(["0.5"] * 16) + "]]"
        answer = subprocess.run(
            [
                sys.executable,
                "-m",
                "services.cli.main",
                "infer",
                "demo-mlp",
                "--bootstrap",
                bootstrap,
                "--models",
                str(tmp_path / "models"),
                "--json",
                f'{{"x": {x}}}',
                "--timeout",
                "90",
            ],
            capture_output=True,
            timeout=120,
            check=False,
        )

        text = log.read_text()
        assert "the embedded broker exited (return code -9)" in text
        assert not _alive(broker)
        assert answer.returncode == 0, (answer.stdout + answer.stderr).decode()[-3000:]
        assert b'"status":"ok"' in answer.stdout.replace(b" ", b"")
        os.killpg(up.pid, signal.SIGINT)
        assert up.wait(timeout=STOPPED_WITHIN_S) == 0, log.read_text()[-3000:]
    finally:
        _kill_all(up)


def test_the_requests_left_in_the_broker_are_counted(broker: str) -> None:
    """What `up` says it loses when it stops: records their group has not committed."""
    import asyncio
    import uuid

    from aiokafka.structs import OffsetAndMetadata, TopicPartition

    from infra.kafka import make_consumer, make_producer
    from infra.topics import TopicSpec, ensure_topics
    from services.cli.stack import queued_requests

    topic, group = f"t-left-{uuid.uuid4().hex[:8]}", f"g-left-{uuid.uuid4().hex[:8]}"

    async def scenario() -> tuple[int | None, int | None]:
        await ensure_topics(broker, [TopicSpec(topic, 1)])
        producer = make_producer(broker)
        await producer.start()
        try:
            for i in range(5):
                await producer.send_and_wait(topic, f"r{i}".encode(), partition=0)
        finally:
            await producer.stop()
        before = await queued_requests(broker, [(group, topic)])
        committer = make_consumer(bootstrap=broker, group_id=group, auto_offset_reset="none")
        await committer.start()
        try:
            committer.assign([TopicPartition(topic, 0)])
            await committer.commit({TopicPartition(topic, 0): OffsetAndMetadata(2, "")})
        finally:
            await committer.stop()
        return before, await queued_requests(broker, [(group, topic)])

    assert asyncio.run(scenario()) == (5, 3)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_sigterm_and_sighup_while_stopping_do_not_skip_the_drain(tmp_path: Path) -> None:
    """A process manager sends SIGTERM again, and a terminal that closes sends SIGHUP after
    it: `make up` in a terminal killed with its group read the second as a Ctrl-C and
    killed every worker undrained (a newcomer's pass, stop 32)."""
    up, log = _start_up(tmp_path)
    try:
        children = _children_of(up.pid)
        assert len(children) >= 3, children

        os.killpg(up.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while b"inferbus stopping:" not in log.read_bytes():
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.05)
        os.killpg(up.pid, signal.SIGTERM)
        os.killpg(up.pid, signal.SIGHUP)
        returncode = up.wait(timeout=STOPPED_WITHIN_S)

        text = log.read_text()
        assert returncode == 0, text[-3000:]
        assert "SIGTERM while stopping: the drain goes on" in text
        assert "SIGHUP while stopping: the drain goes on" in text
        assert "stopped at once" not in text
        assert "inferbus stopped" in text
        left = [pid for pid in children if _alive(pid)]
        assert not left, f"still running after the stack stopped: {left}"
    finally:
        _kill_all(up)

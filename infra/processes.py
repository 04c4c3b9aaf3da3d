"""Supervised child processes: start with death-signal to parent, stop with TERM then KILL."""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra.stalls import await_chain

log = logging.getLogger(__name__)


def die_with_parent() -> None:
    """In a child, before exec: Linux sends SIGTERM when the parent dies, so no orphan stays.

    The death signal follows the thread that forked: fork from a long-lived thread (the
    event loop's, the main one), not from a short-lived worker thread.
    """
    if sys.platform.startswith("linux"):
        pr_set_pdeathsig = 1
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM)


_children: set[int] = set()
"""Pids of the children started here that lead their own process group, still running."""


def track_child(pid: int) -> None:
    """Remember a child that leads its own process group, for `kill_children`."""
    _children.add(pid)


def forget_child(pid: int) -> None:
    """Stop tracking a child that has exited (its pid may be reused by anyone)."""
    _children.discard(pid)


def tracked_children() -> frozenset[int]:
    """The pids `kill_children` would signal now."""
    return frozenset(_children)


def kill_children() -> list[int]:
    """SIGKILL the process group of every tracked child at once: the forced stop (a second
    Ctrl-C). Returns the pids signalled. Anything in flight there is lost; what was not
    committed is read again on the next start (delivery is at least once)."""
    signalled = []
    for pid in sorted(_children):
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:  # the group is gone already
            continue
        except PermissionError:  # the pid now leads someone else's group: not ours to kill
            log.warning("event=child_kill_refused pid=%d (not ours any more)", pid)
            continue
        signalled.append(pid)
    _children.clear()
    return signalled


def process_started_at(stat: str | None = None, since_boot_s: float | None = None) -> float:
    """When this process started (epoch s): its start time in /proc, which counts the
    interpreter's start-up and imports; now where /proc is not there."""
    try:
        text = stat if stat is not None else Path("/proc/self/stat").read_text()
        ticks = int(text[text.rfind(")") + 2 :].split()[19])
        uptime = (
            since_boot_s if since_boot_s is not None else time.clock_gettime(time.CLOCK_BOOTTIME)
        )
    except (OSError, ValueError, IndexError, AttributeError) as exc:
        log.info(
            "event=process_start_unknown error=%r (time-to-ready counts from now, short by "
            "the start-up)",
            exc,
        )
        return time.time()
    return time.time() - max(uptime - ticks / os.sysconf("SC_CLK_TCK"), 0.0)


def process_rss_bytes(pid: int, proc: Path = Path("/proc")) -> int | None:
    """A process's resident memory, or None when it cannot be read (gone, not Linux)."""
    try:
        pages = int((proc / str(pid) / "statm").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE")  # 4 KiB on x86-64; 16 or 64 KiB on some arm64


def inferbus_command(*args: str) -> list[str]:
    """The command line that runs `inferbus ARGS...` with this interpreter and this code.

    `python -m` puts the working directory first on `sys.path`: started in a project with a
    package named like one of inferbus's (`services`, `infra`, `scaler`, `schemas`,
    `tracing`: common names), the child would import that one, and an installed inferbus's
    workers would die with "No module named services.cli.main". So the
    child runs with `-P` (no such entry) unless this code is the working directory's own
    (a checkout run as is, found through it).
    """
    try:
        safe = safe_path_flags(code_root(), Path.cwd())
    except OSError:  # the working directory was removed: it holds no packages either way
        safe = ["-P"]
    return [sys.executable, *safe, "-m", "services.cli.main", *args]


def code_root() -> Path:
    """The directory this process imports inferbus's packages from."""
    return Path(__file__).resolve().parent.parent


def safe_path_flags(root: Path, cwd: Path) -> list[str]:
    """`-P` for a child `python -m` unless the code's `root` is the working directory.

    Everything but the working directory that found the code here (site-packages, an
    editable install's finder, `PYTHONPATH`) finds it in the child too.
    """
    return [] if root.resolve() == cwd.resolve() else ["-P"]


class ChildProcess:
    """One child process; `start()` and `stop()` are idempotent."""

    def __init__(
        self,
        name: str,
        command: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        log_path: Path | None = None,
    ) -> None:
        self.name = name
        self.command = list(command)
        self.env = {**os.environ, **(env or {})}
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        if self.running:
            return
        if self.process is not None:  # started before and exited: its pid is not ours now
            forget_child(self.process.pid)
        output = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        self.process = subprocess.Popen(
            self.command,
            env=self.env,
            stdin=subprocess.DEVNULL,  # out of the terminal's group: a read would stop it
            stdout=output,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent,  # noqa: PLW1509 - prctl only
            # Its own process group: a terminal's Ctrl-C reaches the parent alone, which
            # stops its children in order (workers drain before ingest and the broker go).
            process_group=0,
        )
        track_child(self.process.pid)
        log.info("event=child_started name=%s pid=%d", self.name, self.process.pid)

    def signal_stop(self) -> None:
        """Ask the child to drain and exit (SIGTERM), without waiting."""
        if self.running and self.process is not None:
            self.process.send_signal(signal.SIGTERM)

    def stop(self, timeout_s: float = 15.0) -> int | None:
        """SIGTERM, wait up to `timeout_s`, then SIGKILL; returns the exit code."""
        process = self.process
        if process is None:
            return None
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                log.warning(
                    "event=child_kill name=%s pid=%d after_s=%.0f",
                    self.name,
                    process.pid,
                    timeout_s,
                )
                process.kill()
                process.wait(timeout=5)
        forget_child(process.pid)
        log.info("event=child_stopped name=%s returncode=%s", self.name, process.returncode)
        return process.returncode


def restart_delay_s(restarts: int, first_s: float, most_s: float) -> float:
    """Backoff before restarting something that died `restarts` times in a row."""
    return float(min(first_s * 2.0 ** max(restarts - 1, 0), most_s))


@dataclass
class RestartBackoff:
    """When copies of a process that exit unasked may start again: `first_s` after the
    first exit, doubling to `most_s`; once every copy has run `healthy_after_s`, the count
    starts over."""

    first_s: float = 1.0
    most_s: float = 30.0
    healthy_after_s: float = 60.0
    failures: int = 0
    """Rounds with an unasked exit, in a row."""
    next_at: float = 0.0
    """No start before this (the owner's clock)."""

    def settle(self, exited: bool, started_at: Iterable[float], now: float) -> None:
        """After one round of looking at the copies: `exited` whether any exited unasked,
        `started_at` when each one still running started."""
        if exited:
            self.failures += 1
            delay = restart_delay_s(self.failures, self.first_s, self.most_s)
            self.next_at = max(self.next_at, now + delay)
            return
        starts = list(started_at)
        if starts and all(now - t >= self.healthy_after_s for t in starts):
            self.failures = 0

    def waiting(self, now: float) -> bool:
        """Whether a start must wait (a backoff runs)."""
        return now < self.next_at


class SupervisedGroup:
    """N copies of one command, restarted with backoff when they exit unasked.

    `check()` is called every fraction of a second by the owner's loop; `stop()` ends them
    all (SIGTERM, then SIGKILL) and stops restarting.
    """

    def __init__(
        self,
        name: str,
        command: Sequence[str],
        copies: int,
        *,
        env_for: Callable[[int], Mapping[str, str]] | None = None,
        log_dir: Path | None = None,
        backoff_s: tuple[float, float] = (1.0, 30.0),
        healthy_after_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.command = list(command)
        self.copies = copies
        self._env_for = env_for
        self._log_dir = log_dir
        self._backoff = RestartBackoff(*backoff_s, healthy_after_s=healthy_after_s)
        self._clock = clock
        self._started_at: dict[int, float] = {}
        self._spawned = 0
        self.children: list[ChildProcess] = []
        self.restarts = 0
        self._stopped = False

    def start(self) -> None:
        for _ in range(self.copies - len(self.children)):
            self._spawn()

    def _spawn(self) -> ChildProcess:
        index = self._spawned
        self._spawned += 1
        env = dict(self._env_for(index)) if self._env_for else {}
        log_path = self._log_dir / f"{self.name}-{index}.log" if self._log_dir else None
        child = ChildProcess(f"{self.name}-{index}", self.command, env=env, log_path=log_path)
        child.start()
        self.children.append(child)
        self._started_at[id(child)] = self._clock()
        return child

    def check(self) -> list[ChildProcess]:
        """Restart what exited unasked (after its backoff); returns the ones found dead."""
        if self._stopped:
            return []
        now = self._clock()
        dead = [c for c in self.children if not c.running]
        for child in dead:
            if child.pid is not None:
                forget_child(child.pid)
            log.warning(
                "event=child_exited name=%s pid=%s returncode=%s",
                child.name,
                child.pid,
                child.process.returncode if child.process else None,
            )
        self.children = [c for c in self.children if c not in dead]
        self._backoff.settle(bool(dead), (self._started_at[id(c)] for c in self.children), now)
        if len(self.children) < self.copies and not self._backoff.waiting(now):
            for _ in range(self.copies - len(self.children)):
                self._spawn()
                self.restarts += 1
        return dead

    def stop(self) -> None:
        self._stopped = True
        for child in self.children:
            child.stop()


class StopDeadline:
    """A service's stop, bounded: the steps that wait on the broker share `limit_s`, each
    cut short once it is spent (or after its own `most_s`), said with what it gives up;
    the stop goes on with the next. A broker that is away holds every request for the
    Kafka client's timeout (30 s): a stop of six such steps took minutes, in silence.

    Made in a running event loop (its clock)."""

    def __init__(self, service: str, limit_s: float) -> None:
        self.service = service
        self.limit_s = limit_s
        self._loop = asyncio.get_running_loop()
        self._at = self._loop.time() + limit_s
        self.gave_up: list[str] = []
        """What the cut steps gave up, in order."""
        log.info(
            "event=stopping service=%s limit_s=%.0f (what needs the broker is given up after "
            "that; a second signal exits at once)",
            service,
            limit_s,
        )

    def renew(self, limit_s: float) -> None:
        """The steps from now on share `limit_s` (never past the first deadline): a stop
        whose first part (a worker's drain) ended early keeps its time for the rest."""
        self._at = min(self._at, self._loop.time() + limit_s)

    def restart(self, limit_s: float, after: str) -> None:
        """The steps from now on share `limit_s` afresh: `after`, a wait with a limit of its
        own (a scaler's handover), took what time it took. What was given up is kept."""
        self._at = self._loop.time() + limit_s
        log.info(
            "event=stop_limit_restarted service=%s after=%s limit_s=%.0f",
            self.service,
            after,
            limit_s,
        )

    async def step(
        self, name: str, work: Awaitable[object], gives_up: str, *, most_s: float | None = None
    ) -> bool:
        """Await `work` until the deadline (or `most_s`, if sooner); its error is raised.
        False when cut short: it is cancelled and left (a Kafka client may hold on to a
        cancelled request), logged with `gives_up`."""
        at = self._at if most_s is None else min(self._at, self._loop.time() + most_s)
        started = self._loop.time()
        task = asyncio.ensure_future(work)
        done, _ = await asyncio.wait({task}, timeout=max(at - started, 0.0))
        if task in done:
            task.result()
            return True
        task.cancel()
        self.gave_up.append(gives_up)
        log.warning(
            "event=stop_step_cut service=%s step=%s after_s=%.1f gave_up=%r (the broker did "
            "not answer in time; the stop goes on)",
            self.service,
            name,
            self._loop.time() - started,
            gives_up,
        )
        return False

    async def end_tasks(
        self, name: str, tasks: Collection[asyncio.Task[Any]], *, most_s: float
    ) -> bool:
        """Cancel `tasks` and wait until they have ended, as a step: their errors are not
        raised here (`infra.tasks.say_failure` says them when they happen). One still
        running when the step is cut (a loop that dropped its cancel) is named, with the
        chain of awaits it waits in (`awaits_of`)."""
        for task in tasks:
            task.cancel()
        if not tasks or await self.step(
            name, asyncio.wait(tasks), "loops that did not end when cancelled", most_s=most_s
        ):
            return True
        for task in tasks:
            if not task.done():
                at = awaits_of(task)
                log.error(
                    "event=task_did_not_end service=%s task=%s waiting_at=%r (a cancel it "
                    "dropped; left running)",
                    self.service,
                    task.get_name(),
                    at,
                )
        return False


def awaits_of(task: asyncio.Task[Any]) -> str:
    """`infra.stalls.await_chain`, short: `poll.py:170 > tasks.py:35 > tasks.py:649`."""
    chain = [Path(entry.rsplit(" ", 1)[0]).name for entry in await_chain(task)]
    return " > ".join(chain) or "?"


def name_this_thread(name: str) -> None:
    """Give the calling OS thread a name (15 bytes at most) that /proc and top show."""
    if sys.platform.startswith("linux"):
        pr_set_name = 15
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(pr_set_name, name.encode()[:15], 0, 0, 0)

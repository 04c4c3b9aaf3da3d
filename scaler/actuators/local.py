"""The embedded actuator: worker groups as child processes of the scaler, drained on SIGTERM."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import os
import signal
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from infra.broker import port_is_free
from infra.processes import (
    RestartBackoff,
    die_with_parent,
    forget_child,
    inferbus_command,
    track_child,
)
from infra.tasks import cancel_and_wait, within
from scaler.actuators.base import Actuator, ActuatorError, parse_group

log = logging.getLogger(__name__)


def default_command() -> list[str]:
    """`inferbus worker` run by this interpreter: `inferbus scaler run` started from a virtual
    environment that is not activated (`.venv/bin/inferbus`) found no `inferbus` on the PATH,
    and every start failed with "No such file or directory". Built when an actuator is,
    from the working directory then (`inferbus_command`)."""
    return inferbus_command("worker")


METRICS_PORT_VARIABLE = "INFERBUS_WORKER_METRICS_PORT"
"""Under the local actuator, the first of the workers' metrics ports (each takes its own)."""


@dataclass
class _Child:
    process: asyncio.subprocess.Process
    started_at: float
    log_file: IO[bytes] | None = None
    instance_id: str = ""
    metrics_port: int | None = None

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def running(self) -> bool:
        return self.process.returncode is None


@dataclass
class _Group:
    children: list[_Child] = field(default_factory=list)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    wanted: int = 0
    """Replicas the last `scale` asked for: the supervisor keeps this many running."""
    backoff: RestartBackoff = field(default_factory=RestartBackoff)
    """When replacements of workers that exited unasked may start."""


Announce = Callable[[str, str, int | None], Awaitable[None]]
"""(group, instance id, return code) of a worker that exited unasked: e.g. mark it `gone`."""


def _signal_group(pid: int, sig: signal.Signals) -> None:
    """Signal the child's whole process group (it leads its own session)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, sig)


ERROR_TAIL_BYTES = 16_384
"""How much of a worker's log end is searched for the reason it exited."""


def error_line(text: str) -> str | None:
    """The last `error: ...` line a command printed (its one-line reason for exit 1)."""
    lines = [line for line in text.splitlines() if line.startswith("error: ")]
    return lines[-1].removeprefix("error: ").strip() if lines else None


def last_error(log_path: Path) -> str | None:
    """Why a worker exited, from the end of its log: a worker that cannot load its model
    restarts with backoff, and `inferbus up` said only `returncode=1` for each try (the
    reason was in the log file alone)."""
    try:
        with log_path.open("rb") as f:
            f.seek(max(f.seek(0, os.SEEK_END) - ERROR_TAIL_BYTES, 0))
            return error_line(f.read().decode(errors="replace"))
    except OSError:
        return None


class LocalActuator(Actuator):
    """Starts `<command> --model M --tier T --bootstrap B --models DIR` per replica (with
    `--lane canary` for a canary group: the worker serves model.yaml's rollout.canary).

    Scale-down sends SIGTERM to the newest workers and waits for them to drain; a second
    SIGTERM after `grace_s`, SIGKILL after `kill_after_s` more (with `drain_in_background`,
    `scale` returns once they are signalled and `close` awaits the drains). Every child leads
    its own process group, gets SIGTERM if the scaler dies, and is killed at interpreter exit.
    """

    def __init__(
        self,
        bootstrap: str,
        models_dir: Path,
        *,
        command: Sequence[str] | None = None,
        env: Mapping[str, str] | None = None,
        log_dir: Path | None = None,
        grace_s: float = 30.0,
        kill_after_s: float = 5.0,
        drain_in_background: bool = False,
        announce_exit: Announce | None = None,
        restart_backoff_s: tuple[float, float] = (1.0, 30.0),
        healthy_after_s: float = 60.0,
    ) -> None:
        self._bootstrap = bootstrap
        self._models_dir = Path(models_dir)
        self._command = default_command() if command is None else list(command)
        self._env = {**os.environ, **env} if env is not None else None
        self._log_dir = log_dir
        self._grace_s = grace_s
        self._kill_after_s = kill_after_s
        self._groups: dict[str, _Group] = {}
        self._closed = False
        self._spawned = 0
        self._drain_in_background = drain_in_background
        self._draining: dict[asyncio.Task[None], _Child] = {}
        self._announce_exit = announce_exit
        self._backoff = restart_backoff_s
        self._healthy_after_s = healthy_after_s
        """A new group's `RestartBackoff`: (first, most) seconds, and the clean run that
        starts its count over."""
        self._supervisor: asyncio.Task[None] | None = None
        self.restarts = 0
        """Workers the supervisor started again after they exited unasked."""
        atexit.register(self._kill_all_now)

    def argv(self, group: str) -> list[str]:
        """The command line of one worker of `group`."""
        model, tier, lane = parse_group(group)
        argv = [
            *self._command,
            "--model",
            model,
            "--tier",
            tier,
            "--bootstrap",
            self._bootstrap,
            "--models",
            str(self._models_dir),
        ]
        return argv if lane == "stable" else [*argv, "--lane", lane]

    def groups(self) -> list[str]:
        """The groups this actuator has started workers for."""
        return sorted(self._groups)

    def pids(self, group: str) -> list[int]:
        """Running workers of a group, oldest first."""
        return [c.pid for c in self._reap(group)]

    def instance_ids(self, group: str) -> dict[int, str]:
        """Running workers of a group: pid to the instance id it registers (and answers) as."""
        return {c.pid: c.instance_id for c in self._reap(group)}

    async def current(self, group: str) -> int:
        return len(self._reap(group))

    def stopping(self) -> list[int]:
        """Workers told to stop (scale-down) that have not exited yet, any group."""
        return [c.pid for c in self._draining.values() if c.running]

    async def scale(self, group: str, replicas: int, reason: str) -> None:
        if self._closed:
            raise ActuatorError("local actuator is closed", group=group)
        if replicas < 0:
            raise ActuatorError("replicas must be >= 0", group=group, replicas=replicas)
        state = self._groups.get(group)
        if state is None:
            backoff = RestartBackoff(*self._backoff, healthy_after_s=self._healthy_after_s)
            state = self._groups[group] = _Group(backoff=backoff)
        self._supervise()
        async with state.lock:
            state.wanted = replicas
            now = time.monotonic()
            await self._settle_exits(group, state, now)
            running = self._reap(group)
            if replicas > len(running) and state.backoff.waiting(now):
                # Crashing (a canary that cannot load): the supervisor starts them when the
                # backoff ends. Spawning here on every tick bypassed it (a start every 5 s).
                log.info(
                    "event=scale_up_after_backoff group=%s wanted=%d in_s=%.1f",
                    group,
                    replicas,
                    state.backoff.next_at - now,
                )
            elif replicas > len(running):
                for _ in range(replicas - len(running)):
                    # Spawn first, then append: `_reap` replaces the list while we await.
                    child = await self._spawn(group)
                    state.children.append(child)
            elif replicas < len(running):
                # Newest first: the oldest workers are warm and hold their partitions longest.
                victims = running[replicas:][::-1]
                state.children = [c for c in state.children if c not in victims]
                if self._drain_in_background:
                    # A drain lasts a rebalance (6 s on Tansu) up to grace_s; awaited here it
                    # stalled the scaler's loop (no collection, no scale-up) that long.
                    for victim in victims:
                        task = asyncio.create_task(self._stop(group, victim))
                        self._draining[task] = victim
                        task.add_done_callback(self._draining.pop)
                else:
                    await asyncio.gather(*(self._stop(group, c) for c in victims))
            log.info(
                "event=local_scaled group=%s from=%d to=%d reason=%r",
                group,
                len(running),
                replicas,
                reason,
            )

    def _supervise(self) -> None:
        if self._supervisor is None or self._supervisor.done():
            self._supervisor = asyncio.create_task(self._supervise_loop(), name="local-supervisor")

    async def _supervise_loop(self, every_s: float = 0.5) -> None:
        """Replace workers that exit unasked (a crash, kill -9), with backoff per group."""
        while not self._closed:
            await asyncio.sleep(every_s)
            for group, state in list(self._groups.items()):
                try:
                    await self._heal(group, state)
                except ActuatorError as exc:  # retried on the next round, with backoff
                    log.error("event=worker_restart_failed group=%s error=%s", group, exc)
                    state.backoff.next_at = time.monotonic() + state.backoff.most_s

    async def _settle_exits(self, group: str, state: _Group, now: float) -> None:
        """Children that exited unasked are said and dropped, and back the group off (under
        `state.lock`); a group whose children have all run `healthy_after_s` starts over."""
        dead = [c for c in state.children if not c.running]
        for child in dead:
            await self._exited(group, child)
        # Not `if c.running`: one that died during the awaits above is handled next round.
        state.children = [c for c in state.children if c not in dead]
        state.backoff.settle(bool(dead), (c.started_at for c in state.children), now)

    async def _heal(self, group: str, state: _Group) -> None:
        now = time.monotonic()
        async with state.lock:
            await self._settle_exits(group, state, now)
            missing = state.wanted - len(state.children)
            if missing <= 0 or state.backoff.waiting(now) or self._closed:
                return
            for _ in range(missing):
                state.children.append(await self._spawn(group))
                self.restarts += 1
            log.warning(
                "event=workers_restarted group=%s count=%d attempt=%d",
                group,
                missing,
                state.backoff.failures,
            )

    async def _exited(self, group: str, child: _Child) -> None:
        why = None
        if child.log_file is not None:
            child.log_file.close()
            why = last_error(Path(child.log_file.name))
            child.log_file = None
        log.warning(
            "event=worker_exited group=%s pid=%d instance=%s returncode=%s%s",
            group,
            child.pid,
            child.instance_id,
            child.process.returncode,
            f" why={why!r}" if why else "",
        )
        forget_child(child.pid)
        if self._announce_exit is not None and child.instance_id:
            try:
                await self._announce_exit(group, child.instance_id, child.process.returncode)
            except Exception as exc:  # its lease runs out instead: slower, never wrong
                log.warning("event=exit_announce_failed group=%s error=%r", group, exc)

    async def _spawn(self, group: str) -> _Child:
        log_file: IO[bytes] | None = None
        if self._log_dir is not None:
            self._log_dir.mkdir(parents=True, exist_ok=True)
            stamp = time.strftime("%Y%m%dT%H%M%S")
            log_file = (self._log_dir / f"{group}.{stamp}.{self._spawned + 1}.log").open("ab")
        self._spawned += 1
        model, tier, lane = parse_group(group)
        side = "" if lane == "stable" else f"{lane}-"
        instance_id = (
            f"worker-{model}-{side}{tier}-{socket.gethostname()}-{self._spawned}-"
            + (uuid.uuid4().hex[:6])
        )
        env = {**(self._env or os.environ), "INFERBUS_WORKER_INSTANCE_ID": instance_id}
        metrics_port = self._metrics_port(env.get(METRICS_PORT_VARIABLE))
        if metrics_port is not None:
            env[METRICS_PORT_VARIABLE] = str(metrics_port)
        try:
            process = await asyncio.create_subprocess_exec(
                *self.argv(group),
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log_file,
                stderr=asyncio.subprocess.STDOUT if log_file else None,
                start_new_session=True,
                preexec_fn=die_with_parent,  # Only prctl in the child: no locks taken.
            )
        except OSError as exc:
            if log_file is not None:
                log_file.close()
            raise ActuatorError(
                f"cannot start worker: {exc.strerror}", group=group, command=self._command[0]
            ) from exc
        track_child(process.pid)
        log.info(
            "event=worker_started group=%s pid=%d instance=%s metrics_port=%s",
            group,
            process.pid,
            instance_id,
            metrics_port,
        )
        return _Child(process, time.monotonic(), log_file, instance_id, metrics_port)

    def _metrics_port(self, base: str | None) -> int | None:
        """Each worker's own metrics port: the lowest from `INFERBUS_WORKER_METRICS_PORT` on
        that no live worker of this actuator holds and the OS calls free (one port for every
        worker would let only the first bind it). None when the variable is unset or 0."""
        try:
            first = int(base or 0)
        except ValueError:
            return None  # the worker itself names the bad setting and exits
        if first <= 0:
            return None
        held = {
            child.metrics_port
            for group in self._groups.values()
            for child in group.children
            if child.running
        } | {child.metrics_port for child in self._draining.values()}
        port = first
        while port in held or not port_is_free("0.0.0.0", port):
            port += 1
        return port

    async def _stop(self, group: str, child: _Child) -> None:
        """SIGTERM, wait `grace_s`; SIGTERM again, wait `kill_after_s`; then SIGKILL."""
        steps = (
            (signal.SIGTERM, self._grace_s),
            (signal.SIGTERM, self._kill_after_s),
            (signal.SIGKILL, None),
        )
        for sig, wait_s in steps:
            if not child.running:
                break
            _signal_group(child.pid, sig)
            try:
                await within(child.process.wait(), wait_s)
            except TimeoutError:
                log.warning(
                    "event=worker_slow_to_stop group=%s pid=%d signal=%s waited_s=%.1f",
                    group,
                    child.pid,
                    sig.name,
                    wait_s,
                )
        # The worker may have left children of its own in its process group.
        _signal_group(child.pid, signal.SIGKILL)
        forget_child(child.pid)
        if child.log_file is not None:
            child.log_file.close()
        log.info(
            "event=worker_stopped group=%s pid=%d returncode=%s",
            group,
            child.pid,
            child.process.returncode,
        )

    def _reap(self, group: str) -> list[_Child]:
        """Running children, oldest first (the supervisor handles the ones that exited)."""
        state = self._groups.get(group)
        if state is None:
            return []
        return [c for c in state.children if c.running]

    async def close(self) -> None:
        """Drain every worker (SIGTERM, then SIGKILL after the grace period); idempotent."""
        if self._closed:
            return
        self._closed = True
        await cancel_and_wait(self._supervisor)
        children = [(g, c) for g, s in self._groups.items() for c in s.children]
        await asyncio.gather(*(self._stop(g, c) for g, c in children), *list(self._draining))
        self._groups.clear()
        atexit.unregister(self._kill_all_now)

    def _kill_all_now(self) -> None:
        """At interpreter exit, when close() never ran: no worker outlives the scaler."""
        for state in self._groups.values():
            for child in state.children:
                if child.running:
                    _signal_group(child.pid, signal.SIGKILL)
        for child in list(self._draining.values()):
            if child.running:
                _signal_group(child.pid, signal.SIGKILL)

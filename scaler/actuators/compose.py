"""The docker compose actuator: `docker compose up -d --no-recreate --scale <service>=N`."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from infra.tasks import within
from scaler.actuators.base import Actuator, ActuatorError, canary_hint, dns_label, parse_group

log = logging.getLogger(__name__)

Runner = Callable[[Sequence[str]], Awaitable[tuple[int, str, str]]]
"""Runs an argv and returns (exit code, stdout, stderr); tests pass a fake."""


def service_name(group: str) -> str:
    """`inferbus.workers.<model>.<tier>` to the compose service `worker-<model>-<tier>`; a
    canary group's service is `worker-<model>-canary-<tier>` (INFERBUS_WORKER_LANE=canary)."""
    model, tier, lane = parse_group(group)
    if lane == "stable":
        return dns_label("worker", model, tier)
    return dns_label("worker", model, lane, tier)


async def run_process(argv: Sequence[str]) -> tuple[int, str, str]:
    """Run a command to completion."""
    process = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await process.communicate()
    return process.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace")


class ComposeActuator(Actuator):
    """Scales one compose service per worker group of a compose project."""

    def __init__(
        self,
        compose_file: Path,
        *,
        project: str | None = None,
        project_dir: Path | None = None,
        docker: Sequence[str] = ("docker", "compose"),
        service_for: Callable[[str], str] = service_name,
        runner: Runner = run_process,
        timeout_s: float = 120.0,
    ) -> None:
        """`project_dir`: the project's folder on the Docker host
        (`INFERBUS_SCALER_COMPOSE_PROJECT_DIR`); None: the compose file's folder."""
        self._base = [*docker, "-f", str(compose_file)]
        if project is not None:
            self._base += ["-p", project]
        if project_dir is not None:
            # The engine resolves bind mounts on the host: a relative `./models` must name
            # the host's project folder, not the folder the file is mounted at in here.
            self._base += ["--project-directory", str(project_dir)]
        self._service_for = service_for
        self._runner = runner
        self._timeout_s = timeout_s

    def scale_argv(self, group: str, replicas: int) -> list[str]:
        """The command that sets a group's replicas without touching running containers."""
        service = self._service_for(group)
        return [
            *self._base,
            "up",
            "-d",
            "--no-recreate",
            "--no-deps",
            "--scale",
            f"{service}={replicas}",
            service,
        ]

    def ps_argv(self, group: str) -> list[str]:
        """The command that lists a group's running containers as JSON."""
        return [
            *self._base,
            "ps",
            "--format",
            "json",
            "--status",
            "running",
            self._service_for(group),
        ]

    async def _run(self, group: str, argv: Sequence[str]) -> str:
        try:
            code, out, err = await within(self._runner(argv), self._timeout_s)
        except TimeoutError as exc:
            raise ActuatorError(
                "docker compose timed out", group=group, argv=" ".join(argv)
            ) from exc
        except OSError as exc:
            raise ActuatorError(f"cannot run docker compose: {exc.strerror}", group=group) from exc
        if code != 0:
            hint = canary_hint(group, self._service_for(group), "compose service")
            raise ActuatorError(
                f"docker compose exited {code}: {err.strip()[-500:]}{hint}",
                group=group,
                argv=" ".join(argv),
            )
        return out

    async def current(self, group: str) -> int:
        return count_containers(await self._run(group, self.ps_argv(group)))

    async def scale(self, group: str, replicas: int, reason: str) -> None:
        if replicas < 0:
            raise ActuatorError("replicas must be >= 0", group=group, replicas=replicas)
        await self._run(group, self.scale_argv(group, replicas))
        log.info(
            "event=compose_scaled group=%s service=%s replicas=%d reason=%r",
            group,
            self._service_for(group),
            replicas,
            reason,
        )

    async def close(self) -> None:
        """Nothing is held between commands."""


def count_containers(ps_json: str) -> int:
    """Containers in `docker compose ps --format json` output: one array, or one per line."""
    text = ps_json.strip()
    if not text:
        return 0
    if text.startswith("["):
        return len(json.loads(text))
    return sum(1 for line in text.splitlines() if line.strip())

"""Choose and build the scaler's actuator: local processes, Kubernetes or docker compose."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal, get_args

from scaler.actuators.base import Actuator, ActuatorError

ActuatorKind = Literal["local", "kubernetes", "compose"]
ACTUATOR_KINDS: tuple[str, ...] = (*get_args(ActuatorKind), "auto")


def choose_kind(requested: str, env: Mapping[str, str]) -> ActuatorKind:
    """`auto` is Kubernetes inside a pod (KUBERNETES_SERVICE_HOST is set), else local."""
    if requested == "auto":
        return "kubernetes" if env.get("KUBERNETES_SERVICE_HOST") else "local"
    if requested not in get_args(ActuatorKind):
        raise ActuatorError(
            f"unknown actuator {requested!r}; choose one of {', '.join(ACTUATOR_KINDS)}"
        )
    return requested  # type: ignore[return-value]


def make_actuator(
    kind: ActuatorKind,
    *,
    bootstrap: str,
    models_dir: Path,
    namespace: str = "inferbus",
    compose_file: Path = Path("docker-compose.yml"),
    compose_project: str | None = None,
    compose_project_dir: Path | None = None,
    worker_command: Sequence[str] | None = None,
    log_dir: Path | None = None,
    worker_grace_s: float | None = None,
) -> Actuator:
    """Build the actuator of `kind`; the Kubernetes client is imported only when asked for.

    `worker_command`: what the local actuator runs (None: `inferbus worker` by this
    interpreter). `worker_grace_s`: how long it waits after SIGTERM before a second one
    (the workers' `WorkerSettings.stop_grace_s`); None: `LocalActuator`'s own default."""
    if kind == "kubernetes":
        from scaler.actuators.kubernetes import KubernetesActuator

        return KubernetesActuator(namespace)
    if kind == "compose":
        from scaler.actuators.compose import ComposeActuator

        return ComposeActuator(
            compose_file, project=compose_project, project_dir=compose_project_dir
        )
    from scaler.actuators.local import LocalActuator

    if worker_grace_s is None:
        return LocalActuator(bootstrap, models_dir, command=worker_command, log_dir=log_dir)
    return LocalActuator(
        bootstrap, models_dir, command=worker_command, log_dir=log_dir, grace_s=worker_grace_s
    )

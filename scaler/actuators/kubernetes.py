"""The Kubernetes actuator: the scale subresource of one worker Deployment per group."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from infra.tasks import within
from scaler.actuators.base import Actuator, ActuatorError, canary_hint, dns_label, parse_group

log = logging.getLogger(__name__)

INSTALL_HINT = "pip install -e '.[k8s]'"


def deployment_name(group: str) -> str:
    """`inferbus.workers.<model>.<tier>` to `inferbus-worker-<model>-<tier>` (DNS-1123); a
    canary group's Deployment is `inferbus-worker-<model>-canary-<tier>` (its workers set
    INFERBUS_WORKER_LANE=canary)."""
    model, tier, lane = parse_group(group)
    if lane == "stable":
        return dns_label("inferbus-worker", model, tier)
    return dns_label("inferbus-worker", model, lane, tier)


def load_apps_api() -> Any:
    """An `AppsV1Api` from in-cluster config, else from ~/.kube/config."""
    try:
        from kubernetes import client, config
    except ImportError as exc:
        raise ActuatorError(
            f"the Kubernetes actuator needs the official client: {INSTALL_HINT}"
        ) from exc
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return client.AppsV1Api()


class KubernetesActuator(Actuator):
    """Reads and patches `deployments/scale` in one namespace (RBAC in infra/k8s/).

    `api` is an `AppsV1Api` (or anything with its two scale methods, for tests).
    """

    def __init__(
        self,
        namespace: str = "inferbus",
        *,
        api: Any = None,
        name_for: Callable[[str], str] = deployment_name,
        timeout_s: float = 10.0,
    ) -> None:
        self.namespace = namespace
        self._api = api if api is not None else load_apps_api()
        self._name_for = name_for
        self._timeout_s = timeout_s

    async def _call(self, group: str, what: str, fn: Callable[[], Any]) -> Any:
        name = self._name_for(group)
        try:
            return await within(asyncio.to_thread(fn), self._timeout_s)
        except TimeoutError as exc:
            raise ActuatorError(
                f"{what} deployment {name} timed out", group=group, namespace=self.namespace
            ) from exc
        except Exception as exc:
            # The client raises ApiException (status, reason) or urllib3 errors: all mean the
            # scale could not be read or set, which the scaler reports and retries next tick.
            status = getattr(exc, "status", None)
            hint = canary_hint(group, name, "Deployment") if status == 404 else ""
            raise ActuatorError(
                f"{what} deployment {name} failed: {getattr(exc, 'reason', None) or exc}{hint}",
                group=group,
                namespace=self.namespace,
                status=status,
            ) from exc

    async def current(self, group: str) -> int:
        name = self._name_for(group)
        scale = await self._call(
            group,
            "reading the scale of",
            lambda: self._api.read_namespaced_deployment_scale(name, self.namespace),
        )
        replicas = scale.spec.replicas if scale.spec is not None else None
        return int(replicas or 0)

    async def scale(self, group: str, replicas: int, reason: str) -> None:
        if replicas < 0:
            raise ActuatorError("replicas must be >= 0", group=group, replicas=replicas)
        name = self._name_for(group)
        body = {"spec": {"replicas": replicas}}
        await self._call(
            group,
            "patching the scale of",
            lambda: self._api.patch_namespaced_deployment_scale(name, self.namespace, body),
        )
        log.info(
            "event=k8s_scaled group=%s deployment=%s namespace=%s replicas=%d reason=%r",
            group,
            name,
            self.namespace,
            replicas,
            reason,
        )

    async def close(self) -> None:
        api_client = getattr(self._api, "api_client", None)
        if api_client is not None and hasattr(api_client, "close"):
            api_client.close()

"""Scaler service settings (env prefix `INFERBUS_SCALER_`)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

IDLE_HOLD_EVERY_S = 25.0
"""How often an idle group's unchanged hold is written (`worth_writing`): under the 30 s
of decisions a starting worker reads back (`ConsumerOptions.control_window_s`), so it finds
the scaler's word on how many of its group consume."""


class ScalerSettings(BaseSettings):
    """How the running scaler collects, decides and acts."""

    model_config = SettingsConfigDict(env_prefix="INFERBUS_SCALER_", extra="ignore")

    actuator: Literal["auto", "local", "kubernetes", "compose"] = "auto"
    """`local`, `kubernetes`, `compose` or `auto` (Kubernetes inside a pod, else local)."""
    policy: Literal["slo", "keda-lag", "hpa-util"] = "slo"
    """`slo` (ours), or the baselines `keda-lag` and `hpa-util`."""
    interval_s: float = Field(default=5.0, gt=0)
    """Seconds between collections and decisions."""
    idle_hold_every_s: float = Field(default=IDLE_HOLD_EVERY_S, ge=0, le=30)
    """An idle group's unchanged hold is written this often, not every tick (0: every
    tick); at most 30 s, the decisions a starting worker reads back (`IDLE_HOLD_EVERY_S`)."""
    max_total_replicas: int | None = Field(default=None, ge=0)
    """Global replica budget shared by tier priority; None = no budget."""
    scale_down_window_s: float = Field(default=300.0, ge=0)
    """Scale-down stabilisation window, seconds (HPA's default)."""
    namespace: str = "inferbus"
    """Kubernetes namespace of the worker Deployments."""
    compose_file: Path = Path("docker-compose.yml")
    """docker compose file whose worker services are scaled."""
    compose_project: str | None = None
    """docker compose project name."""
    metrics_port: int = 0
    """Prometheus /metrics port; 0 turns it off."""
    dry_run: bool = False
    """Decide and publish, but never change replicas."""

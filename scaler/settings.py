"""Scaler service settings (env prefix `INFERBUS_SCALER_`)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

IDLE_HOLD_EVERY_S = 25.0
"""How often an idle group's unchanged hold is written (`worth_writing`): under the 30 s
of decisions a starting worker reads back (`ConsumerOptions.control_window_s`), so it finds
the scaler's word on how many of its group consume."""


IDLE_HOLD_EVERY_MAX_S = 30.0
"""The longest an idle hold may go unwritten: what a restart's replay gives holds back over
(`scaler/recall.py`), whatever the scaler before it had set."""

RECALL_TIMEOUT_S = 10.0
"""How long a starting scaler reads its decision records back (`scaler/recall.py`): 45
minutes of five groups' records is at most ~2,700 small records, read in well under a
second."""


class ScalerSettings(BaseSettings):
    """How the running scaler collects, decides and acts."""

    model_config = SettingsConfigDict(env_prefix="INFERBUS_SCALER_", extra="ignore")

    actuator: Literal["auto", "local", "kubernetes", "compose"] = "auto"
    """`local`, `kubernetes`, `compose` or `auto` (Kubernetes inside a pod, else local)."""
    policy: Literal["slo", "keda-lag", "hpa-util"] = "slo"
    """`slo` (ours), or the baselines `keda-lag` and `hpa-util`."""
    interval_s: float = Field(default=5.0, gt=0, allow_inf_nan=False)
    """Seconds between collections and decisions."""
    idle_hold_every_s: float = Field(
        default=IDLE_HOLD_EVERY_S, ge=0, le=IDLE_HOLD_EVERY_MAX_S, allow_inf_nan=False
    )
    """An idle group's unchanged hold is written this often, not every tick (0: every
    tick); at most 30 s, the decisions a starting worker reads back (`IDLE_HOLD_EVERY_S`)."""
    recall_timeout_s: float = Field(default=RECALL_TIMEOUT_S, ge=0, le=300, allow_inf_nan=False)
    """How long a starting scaler may read its last 45 minutes of decision records back to
    rebuild the policy's memory (`scaler/recall.py`: the half hour of memory and a warm-up
    before it); 0 starts with none."""
    max_total_replicas: int | None = Field(default=None, ge=0)
    """Global replica budget shared by tier priority; None = no budget."""
    scale_down_window_s: float = Field(default=300.0, ge=0, allow_inf_nan=False)
    """Scale-down stabilisation window, seconds (HPA's default)."""
    namespace: str = "inferbus"
    """Kubernetes namespace of the worker Deployments."""
    compose_file: Path = Path("docker-compose.yml")
    """docker compose file whose worker services are scaled."""
    compose_project: str | None = None
    """docker compose project name."""
    compose_project_dir: Path | None = None
    """The compose project's directory on the Docker host (`--project-directory`): relative
    paths in the compose file (bind mounts such as `./models`) are resolved against it. A
    scaler in a container reads the file from its own mount, so without this they would
    name the mount's folder on the host. None: the compose file's folder."""
    metrics_port: int = Field(default=0, ge=0, le=65535)
    """Prometheus /metrics port; 0 turns it off."""
    dry_run: bool = False
    """Decide and publish, but never change replicas."""
    lease_s: float = Field(default=10.0, ge=0, le=300, allow_inf_nan=False)
    """Seconds a standby scaler waits after the acting one's last renewal before it takes
    over (`scaler/lease.py`): only the lease's holder acts, so a second `scaler run` waits
    instead of fighting it. At least 2; 0 runs without a lease (one scaler only). A dry
    run holds none."""

    @field_validator("lease_s")
    @classmethod
    def _lease_long_enough(cls, value: float) -> float:
        if 0 < value < 2:
            raise ValueError("a lease is 0 (none) or at least 2 s (renewed every quarter)")
        return value

    @field_validator("compose_project_dir", mode="before")
    @classmethod
    def _blank_is_unset(cls, value: object) -> object:
        # docker-compose.yml sets it from ${PWD:-}, which is blank where PWD is not set;
        # Path("") would be the scaler's own working directory.
        return None if isinstance(value, str) and not value.strip() else value

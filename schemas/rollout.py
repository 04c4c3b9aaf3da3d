"""Events on `inferbus.rollouts` (compacted, key = model): the rollout decision in force.

model.yaml's `rollout` block names the stable and canary versions and the canary's share;
a record here overrides that share at runtime (a verdict's rollback, `inferbus models
promote|rollback|share`). It applies only while model.yaml names the same stable and canary
versions: a new canary in model.yaml starts from model.yaml's share again.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

RolloutState = Literal["canary", "rolled_back", "promoted"]
"""`canary`: the canary takes `share` of the requests; `rolled_back`: it takes none;
`promoted`: the stable side serves the canary version and the canary side takes none."""


class VersionNumbers(BaseModel):
    """One version's results over the verdict window, as the scaler measured them."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    version: str
    requests: int = Field(ge=0, description="Terminal results its workers sent.")
    errors: int = Field(ge=0, description="Of them, `internal_error` (the version failed).")
    error_rate: float = Field(ge=0, le=1)
    p99_ms: float | None = Field(default=None, description="p99 end-to-end of its ok results.")


class RolloutEvidence(BaseModel):
    """The numbers an automatic verdict was made on."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    window_s: float
    rule: Literal["error_rate", "p99"] = Field(description="Which margin the canary broke.")
    stable: VersionNumbers
    canary: VersionNumbers
    max_error_rate_increase: float
    max_p99_ratio: float
    min_p99_increase_ms: float


class RolloutRecord(BaseModel):
    """The rollout decision for one model, and why."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    schema_version: Literal[1] = 1
    model: str
    stable: str = Field(description="model.yaml's rollout.stable when the decision was made.")
    canary: str = Field(description="model.yaml's rollout.canary when the decision was made.")
    state: RolloutState
    share: float = Field(ge=0, le=1, description="The canary's share of requests from now on.")
    reason: str
    by: str = Field(description="`verdict` (the scaler), or `cli` with the user and host.")
    at: datetime
    evidence: RolloutEvidence | None = None

    def line(self) -> str:
        """One readable line for logs and the CLI."""
        return (
            f"{self.model} {self.state} (stable {self.stable}, canary {self.canary}, "
            f"canary share {self.share:g}) by {self.by}: {self.reason}"
        )

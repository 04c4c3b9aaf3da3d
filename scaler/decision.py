"""What a policy tick decides: desired replicas per group, with the reasons behind them."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from scaler.signals import Diagnosis
from schemas.topics import Tier

_PLAIN_BELOW = 1e9
"""Reasons print numbers below this in plain digits, larger ones in 3 significant digits."""


def reason_number(x: float, decimals: int = 0) -> str:
    """A number as a reason's message prints it: `2400`, `3.8` (decimals=1); from 1e9 up
    `4.17e+09`, so an absurd input never prints hundreds of digits."""
    if abs(x) < _PLAIN_BELOW:
        return f"{x:.{decimals}f}"
    try:
        return f"{x:.3g}"
    except OverflowError:  # an int beyond a float's range (a sum of saturated counts)
        return f"more than {sys.float_info.max:.3g}"


def reason_amount(x: float) -> str:
    """A rate, count or threshold as a reason says it: 1500, 50, 2.5, 0.3, 0.00011 (a small
    one keeps two significant digits: "lag 1 > 0 the SLO allows" hid 0.1)."""
    if abs(x) >= 10 or x == 0:
        return reason_number(x)
    return f"{x:.1f}" if abs(x) >= 0.1 else f"{x:.2g}"


def reason_percent(share: float) -> str:
    """A share as a reason's message prints it: `85%`, under 1 % `0.5%`; from 1e7 % up
    `1.2e+09%`."""
    if share != 0 and abs(share) < 0.01:
        return f"{share * 100:.2g}%"
    return f"{share:.0%}" if abs(share) < _PLAIN_BELOW / 100 else f"{share * 100:.3g}%"


@dataclass(frozen=True)
class Reason:
    """One machine-readable reason behind a decision, with the numbers it used."""

    code: str
    message: str
    numbers: Mapping[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"code": self.code, "message": self.message, "numbers": dict(self.numbers)}


@dataclass(frozen=True)
class GroupDecision:
    """Desired replicas for one group, with the reasons and a one-word diagnosis."""

    group: str
    model: str
    tier: Tier
    current: int
    desired: int
    diagnosis: Diagnosis
    reasons: tuple[Reason, ...] = ()
    standby: int = 0
    """Warm standby workers to keep beside the `desired` consuming ones (loaded, not consuming)."""
    current_standby: int = 0
    """Standby workers the group has now (any state)."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON object `scaler decide` prints."""
        return {
            "group": self.group,
            "current": self.current,
            "desired": self.desired,
            "current_standby": self.current_standby,
            "standby": self.standby,
            "reasons": [r.to_dict() for r in self.reasons],
            "diagnosis": self.diagnosis,
        }

    def changes(self) -> bool:
        """True when the actuator has something to do: consuming or standby count differs."""
        return self.desired != self.current or self.standby != self.current_standby

    def line(self) -> str:
        """One line a person can read, e.g. `interactive 4→6: queue p99 700 ms > budget …`."""
        arrow = f"{self.current}→{self.desired}" if self.desired != self.current else "hold"
        if self.standby or self.current_standby:
            arrow += (
                f" +{self.standby} standby"
                if self.standby == self.current_standby
                else f" standby {self.current_standby}→{self.standby}"
            )
        text = "; ".join(r.message for r in self.reasons) or self.diagnosis
        return f"{self.tier} {arrow} ({self.model}, {self.diagnosis}): {text}"


@dataclass(frozen=True)
class Decision:
    """One policy tick: a decision per group, in the order the signals came."""

    policy: str
    at: float
    groups: tuple[GroupDecision, ...]

    def desired(self) -> dict[str, int]:
        """Group name to desired replicas."""
        return {g.group: g.desired for g in self.groups}

    def standby(self) -> dict[str, int]:
        """Group name to warm standby replicas to keep."""
        return {g.group: g.standby for g in self.groups}

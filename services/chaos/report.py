"""A scenario's report: counts, time to recover, target checks; as JSON and as a table."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rich.table import Table

from services.chaos.ledger import Tally


@dataclass(frozen=True)
class Check:
    """One target of the issue, met or not, with the numbers that decide it."""

    name: str
    passed: bool
    detail: str
    host_speed: bool = False
    """A target the host's speed decides (a percentile against an SLO, a backlog served
    within its deadlines): reported and counted by the CLI, not asserted by the test
    suite, whose hosts are shared and noisy."""
    broker_defect: str | None = None
    """Why the embedded broker, not inferbus, can miss this target: reported and counted
    by the CLI, not asserted by the test suite (a sibling check bounds the damage)."""

    @property
    def asserted(self) -> bool:
        """Whether the test suite asserts this target."""
        return not self.host_speed and self.broker_defect is None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "passed": self.passed,
            "detail": self.detail,
            "host_speed": self.host_speed,
            "broker_defect": self.broker_defect,
        }


@dataclass
class ScenarioReport:
    """What one scenario run found."""

    name: str
    summary: str
    tally: Tally
    recover_s: float | None
    """Seconds from the fault (or its end) until the stack served again; None: never."""
    checks: list[Check]
    duration_s: float
    log_dir: str
    phases: dict[str, Tally] = field(default_factory=dict)
    extras: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return all(check.passed for check in self.checks)

    def failed(self) -> list[Check]:
        return [check for check in self.checks if not check.passed]

    def correct(self) -> bool:
        """Every asserted target met: all but host-speed and broker-defect ones."""
        return all(check.passed for check in self.checks if check.asserted)

    def to_json(self) -> dict[str, Any]:
        return {
            "scenario": self.name,
            "summary": self.summary,
            "passed": self.passed,
            **self.tally.to_json(),
            "recover_s": _round(self.recover_s),
            "checks": [check.to_json() for check in self.checks],
            "phases": {name: tally.to_json() for name, tally in self.phases.items()},
            "extras": {key: _jsonable(value) for key, value in self.extras.items()},
            "duration_s": round(self.duration_s, 1),
            "log_dir": self.log_dir,
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def _jsonable(value: Any) -> Any:
    """JSON has no infinity: an `inf` latency (a request never served) becomes null."""
    if isinstance(value, float):
        return None if math.isinf(value) or math.isnan(value) else round(value, 3)
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def errors_text(tally: Tally) -> str:
    return ", ".join(f"{status} {n}" for status, n in sorted(tally.errors.items())) or "-"


def recover_text(report: ScenarioReport) -> str:
    return "-" if report.recover_s is None else f"{report.recover_s:.1f}s"


def table(reports: Sequence[ScenarioReport]) -> Table:
    """One row per scenario: sent / ok / errors by status / DLQ / duplicates / lost / recover."""
    out = Table(title="inferbus chaos")
    for column in (
        "scenario",
        "sent",
        "ok",
        "errors",
        "dlq",
        "dup",
        "lost",
        "recover",
        "targets",
    ):
        out.add_column(column, overflow="fold")
    for report in reports:
        t = report.tally
        failed = report.failed()
        verdict = "met" if not failed else "MISSED: " + "; ".join(c.name for c in failed)
        out.add_row(
            report.name,
            str(t.sent) if t.not_accepted == 0 else f"{t.sent} ({t.not_accepted} unacked)",
            str(t.ok),
            errors_text(t),
            str(t.dlq),
            f"{t.duplicates} ({t.conflicts} differ)" if t.conflicts else str(t.duplicates),
            str(t.lost),
            recover_text(report),
            verdict,
        )
    return out


def lines(report: ScenarioReport) -> list[str]:
    """Plain lines for a scenario: the counts, each phase, each check."""
    t = report.tally
    out = [
        f"{report.name}: sent {t.sent} (accepted {t.accepted}) ok {t.ok} "
        f"errors [{errors_text(t)}] dlq {t.dlq} duplicates {t.duplicates} "
        f"conflicts {t.conflicts} lost {t.lost} (late {t.late}) recover {recover_text(report)}"
    ]
    for name, phase in report.phases.items():
        out.append(
            f"  phase {name}: sent {phase.sent} accepted {phase.accepted} ok {phase.ok} "
            f"errors [{errors_text(phase)}] dlq {phase.dlq} lost {phase.lost}"
        )
    for check in report.checks:
        cause = f" (broker defect: {check.broker_defect})" if check.broker_defect else ""
        verdict = "met" if check.passed else "MISSED"
        out.append(f"  [{verdict}] {check.name}: {check.detail}{cause if not check.passed else ''}")
    return out

"""Checks several scenarios make, worded alike in every report."""

from __future__ import annotations

from services.chaos.ledger import Tally
from services.chaos.report import Check


def none_lost(total: Tally, *, note: str | None = None) -> Check:
    """No accepted event lost; `note` follows the numbers in brackets."""
    detail = f"{total.lost} of {total.accepted} accepted lost"
    return Check("0 lost", total.lost == 0, detail if note is None else f"{detail} ({note})")


def first_ok_after(event: str, recover_s: float | None) -> str:
    """When the first request sent after `event` was served ok, for a check's detail."""
    after = "never" if recover_s is None else f"{recover_s:.1f}s after it"
    return f"first ok for a request sent after the {event}: {after}"

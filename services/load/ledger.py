"""Every request of a run, sent and answered: the accounting `inferbus load` reports.

Times are seconds from the run's start on the caller's clock, so the ledger is pure and a
test drives it with a fake one. A request is *lost* when no result came by its deadline
plus a grace: the platform promises one terminal result (ok or a named error) per request.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from schemas.topics import Tier

NOT_SENT = "not_sent"
"""Status of a request the broker never acknowledged (the producer's error is kept)."""


@dataclass(frozen=True, slots=True)
class Sent:
    """One request as produced."""

    request_id: str
    tier: Tier
    t_s: float
    deadline_s: float
    tokens: int


@dataclass(frozen=True, slots=True)
class Answered:
    """The first result seen for a request."""

    t_s: float
    status: str
    timings: Mapping[str, float | None]
    batch_size: int | None = None


@dataclass
class Ledger:
    """Sent requests by id, their first result, repeats and the producer's failures."""

    sent: dict[str, Sent] = field(default_factory=dict)
    answered: dict[str, Answered] = field(default_factory=dict)
    duplicates: int = 0
    send_errors: dict[str, str] = field(default_factory=dict)
    error_samples: dict[str, str] = field(default_factory=dict)
    """The first error message seen for each status."""

    def on_sent(self, request: Sent) -> None:
        """A request was handed to the producer."""
        self.sent[request.request_id] = request

    def on_send_failed(self, request_id: str, error: str, t_s: float) -> None:
        """The broker refused the request: it is answered `not_sent` here, with the reason."""
        self.send_errors[request_id] = error
        self.answered.setdefault(request_id, Answered(t_s, NOT_SENT, {}))
        self.error_samples.setdefault(NOT_SENT, error)

    def on_result(
        self,
        request_id: str,
        t_s: float,
        status: str,
        timings: Mapping[str, float | None],
        *,
        batch_size: int | None = None,
        message: str | None = None,
    ) -> bool:
        """Record a result; False for another client's request or a repeat (counted)."""
        if request_id not in self.sent:
            return False
        if request_id in self.answered:
            self.duplicates += 1
            return False
        self.answered[request_id] = Answered(t_s, status, timings, batch_size)
        if status != "ok" and message:
            self.error_samples.setdefault(status, message)
        return True

    def outstanding(self) -> int:
        """Sent and not answered yet (lost ones included)."""
        return len(self.sent) - len(self.answered)

    def waiting(self, now_s: float, grace_s: float) -> int:
        """Unanswered requests still within their deadline plus `grace_s`: not lost yet."""
        return sum(
            1
            for s in self.sent.values()
            if s.request_id not in self.answered and now_s <= s.deadline_s + grace_s
        )

    def lost(self, now_s: float, grace_s: float) -> list[Sent]:
        """Unanswered requests whose deadline plus `grace_s` has passed."""
        return [
            s
            for s in self.sent.values()
            if s.request_id not in self.answered and now_s > s.deadline_s + grace_s
        ]

    def settled(self, now_s: float, grace_s: float) -> bool:
        """Every request answered, or past its deadline plus the grace: nothing to wait for."""
        return all(
            s.request_id in self.answered or now_s > s.deadline_s + grace_s
            for s in self.sent.values()
        )

    def last_deadline_s(self) -> float:
        """The latest deadline of any request (0 before any is sent)."""
        return max((s.deadline_s for s in self.sent.values()), default=0.0)

    def of_tier(self, tier: Tier) -> list[Sent]:
        """Sent requests of one tier, in send order."""
        return sorted((s for s in self.sent.values() if s.tier == tier), key=lambda s: s.t_s)

    def tiers(self) -> list[Tier]:
        """Tiers that sent anything, in first-send order."""
        return list(dict.fromkeys(s.tier for s in sorted(self.sent.values(), key=lambda s: s.t_s)))

    def statuses(self, requests: Iterable[Sent]) -> Counter[str]:
        """Status counts of these requests (unanswered ones not counted)."""
        return Counter(
            self.answered[s.request_id].status for s in requests if s.request_id in self.answered
        )

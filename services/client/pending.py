"""The client's own requests whose results have not come yet.

Two questions are asked of them. "Is this result ours?" must hold for as long as a result
can still come, even a late one. "Are results still due?" paces the result reader: while
any are due it never idles (infra.pacing). A request stops being due once its deadline
and a grace have passed; a request without a deadline, after `UNBOUNDED_DUE_S`. From then
on it is remembered as ours in a bounded memory, so a late answer (a `deadline_exceeded`
from a worker that came back, say) is still delivered, and a request that is never
answered does not keep the reader brisk or the memory growing.

A third question, "is an urgent one due?", has the reader wait as a critical lane (short
busy waits, no parking until the next burst of a rhythm; infra.pacing) while a critical
request's result is to come.
"""

from __future__ import annotations

import heapq
import logging
import time
from collections import OrderedDict
from collections.abc import Callable

log = logging.getLogger(__name__)

GRACE_S = 10.0
"""How long past its deadline a request's result is still counted as due."""

UNBOUNDED_DUE_S = 600.0
"""How long a request without a deadline counts as due."""

HEAP_SLACK = 1024
"""Answered entries the expiry heap may hold beyond twice the due ones before a rebuild."""

LAPSED_CAPACITY = 100_000
"""How many lapsed request ids are still recognised as ours (oldest forgotten first)."""


class PendingRequests:
    """Requests sent and not answered yet: due until their deadline and `grace_s`, then
    lapsed (still ours, no longer due)."""

    def __init__(
        self,
        *,
        grace_s: float = GRACE_S,
        unbounded_due_s: float = UNBOUNDED_DUE_S,
        lapsed_capacity: int = LAPSED_CAPACITY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._grace_s = grace_s
        self._unbounded_due_s = unbounded_due_s
        self._clock = clock
        self._due: dict[str, float] = {}
        """Request id -> when it stops being due (monotonic)."""
        self._urgent: set[str] = set()
        """The due ones that are urgent (critical tier)."""
        self._expiry: list[tuple[float, str]] = []
        """(stops being due, request id), a heap; answered ids are skipped when popped."""
        self._lapsed: OrderedDict[str, None] = OrderedDict()
        self._lapsed_capacity = lapsed_capacity
        self.lapsed_total = 0
        """Requests that stopped being due without a result."""

    def add(self, request_id: str, *, deadline_in_s: float | None, urgent: bool = False) -> None:
        """A request is being sent; its deadline is `deadline_in_s` from now (None: none);
        `urgent`: its result should not wait for a paced fetch (a critical request)."""
        now = self._clock()
        self._lapse(now)
        if deadline_in_s is None:
            until = now + self._unbounded_due_s
        else:
            until = now + max(deadline_in_s, 0.0) + self._grace_s
        self._lapsed.pop(request_id, None)
        self._due[request_id] = until
        if urgent:
            self._urgent.add(request_id)
        else:
            self._urgent.discard(request_id)
        heapq.heappush(self._expiry, (until, request_id))
        if len(self._expiry) > 2 * len(self._due) + HEAP_SLACK:
            # Answered requests leave their entries behind until their time: drop them.
            self._expiry = [(t, r) for r, t in self._due.items()]
            heapq.heapify(self._expiry)

    def not_sent(self, request_id: str) -> None:
        """Its send failed (the caller was told): no longer due, not counted as overdue,
        still recognised should a result come after all."""
        self._urgent.discard(request_id)
        if self._due.pop(request_id, None) is not None:
            self._remember(request_id)

    def __contains__(self, request_id: object) -> bool:
        return request_id in self._due or request_id in self._lapsed

    def answered(self, request_id: str) -> None:
        """Its result came: neither due nor remembered any more."""
        self._due.pop(request_id, None)
        self._urgent.discard(request_id)
        self._lapsed.pop(request_id, None)

    def any_due(self) -> bool:
        """Whether a result is still due; requests past their time lapse here."""
        self._lapse(self._clock())
        return bool(self._due)

    def any_urgent_due(self) -> bool:
        """Whether an urgent request's result is still due."""
        if not self._urgent:
            return False
        self._lapse(self._clock())
        return bool(self._urgent)

    def _lapse(self, now: float) -> None:
        lapsed = 0
        while self._expiry and self._expiry[0][0] <= now:
            until, request_id = heapq.heappop(self._expiry)
            if self._due.get(request_id) != until:
                continue  # answered, or sent again with a later time
            del self._due[request_id]
            self._urgent.discard(request_id)
            self._remember(request_id)
            lapsed += 1
        if lapsed:
            self.lapsed_total += lapsed
            log.warning(
                "event=results_overdue count=%d total=%d (no result by their deadline plus "
                "%.0f s; a late one is still delivered)",
                lapsed,
                self.lapsed_total,
                self._grace_s,
            )

    def _remember(self, request_id: str) -> None:
        self._lapsed[request_id] = None
        if len(self._lapsed) > self._lapsed_capacity:
            self._lapsed.popitem(last=False)

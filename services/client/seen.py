"""The request ids whose results were already delivered, to drop at-least-once repeats."""

from __future__ import annotations

from collections import OrderedDict


class SeenIds:
    """Bounded memory of answered request ids, to drop at-least-once repeats."""

    def __init__(self, capacity: int = 100_000) -> None:
        self.capacity = capacity
        self._ids: OrderedDict[str, None] = OrderedDict()

    def __contains__(self, request_id: object) -> bool:
        return request_id in self._ids

    def add(self, request_id: str) -> bool:
        """True the first time an id is seen."""
        if request_id in self._ids:
            return False
        self._ids[request_id] = None
        if len(self._ids) > self.capacity:
            self._ids.popitem(last=False)
        return True

    def discard(self, request_id: str) -> None:
        """Forget an id: it is being sent again, and its next result is an answer."""
        self._ids.pop(request_id, None)

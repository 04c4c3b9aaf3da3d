"""Reads `inferbus.rollouts` from its start into a `RolloutBook` (the scaler's reader;
ingest and the workers fold it through their control consumer instead)."""

from __future__ import annotations

from infra.feed import FEED_WAIT_MS, TopicFeed
from infra.kafka import START_ATTEMPTS
from infra.rollout.state import RolloutBook
from schemas.topics import ROLLOUTS


class RolloutFeed(TopicFeed):
    """Consumes the whole topic (it is compacted: one record per model) without a group.

    Decisions are rare: the feed's long fetch wait keeps an idle scaler off the broker.
    """

    def __init__(
        self,
        bootstrap: str,
        book: RolloutBook,
        *,
        topic: str = ROLLOUTS,
        poll_timeout_ms: int = FEED_WAIT_MS,
    ) -> None:
        super().__init__(
            bootstrap,
            topic,
            book.observe,
            name="rollouts",
            start_at="earliest",
            client_id="inferbus-rollouts",
            poll_timeout_ms=poll_timeout_ms,
            start_attempts=START_ATTEMPTS,
        )
        self.book = book

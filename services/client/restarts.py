"""Noticing that the broker restarted (a log that ends before an acked offset), and when to
send again what awaits a result."""

from __future__ import annotations

from collections.abc import Mapping

RESEND_AFTER_RESTART_S = 5.0
"""After a broker restart, a request without a result is sent again once it has waited this
long since it was last sent (`resend_after_s`)..."""
RESEND_FLOOR_S = 1.0
"""...and never sooner than this."""


def resend_after_s(left_s: float | None) -> float:
    """How long a request awaited after a broker restart waits since its last ack before
    it is sent again: `RESEND_AFTER_RESTART_S`, or half the time its caller still waits
    (`left_s`; None: no limit) when that is shorter, never under `RESEND_FLOOR_S`.

    A restarted Tansu can ack a record and lose it (docs/reliability.md); a request sent
    while the broker was away is acked late, when little of its time is left, and must be
    sent again while an answer can still come in time.
    """
    if left_s is None:
        return RESEND_AFTER_RESTART_S
    return max(RESEND_FLOOR_S, min(RESEND_AFTER_RESTART_S, left_s / 2))


class RestartDetector:
    """The highest offset acked on each partition written to since the broker (last) started:
    a log that now ends before one of them is a suspect of a restart."""

    def __init__(self) -> None:
        self._acked: dict[tuple[str, int], int] = {}

    def acked(self, tp: tuple[str, int], offset: int) -> None:
        """Record an ack: the partition's log holds `offset` from now on."""
        self._acked[tp] = max(offset, self._acked.get(tp, -1))

    def snapshot(self) -> dict[tuple[str, int], int]:
        """The acks so far; taken before asking for ends, which acks in flight may pass."""
        return dict(self._acked)


def restart_suspects(
    acked: Mapping[tuple[str, int], int], ends: Mapping[tuple[str, int], int]
) -> dict[tuple[str, int], int]:
    """Partitions (-> reported end) whose end is not past an offset acked there before the
    ends were asked for. Only suspects: Tansu reports the last batch's first offset + 1, so an
    ack inside a batch of several records is past the reported end with nothing lost."""
    return {tp: end for tp, end in ends.items() if tp in acked and end <= acked[tp]}

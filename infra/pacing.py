"""How long each fetch asks the broker to wait: short while records flow and are wanted,
long while a consumer idles or its reader could not use records yet.

Tansu answers a fetch that found nothing at its first check that finds records (half the
wait, then three quarters, seven eighths, ...; docs/kafka.md), and every answered fetch
costs it CPU (on this project's 2-core machine ~0.2 ms a fetch, about as much as the
records in it): a consumer polling with 5 ms waits costs the broker 0.03 to 0.1 of a core
whether records come or not. So the wait is the price of each hop's latency floor, and
paying it only while it buys something is most of the broker's bill (docs/kafka.md).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRecord

from infra.settings import KafkaSettings, kafka_settings

log = logging.getLogger(__name__)


GAP_SMOOTHING = 0.25
"""Weight of the newest gap in the smoothed gap between records (about the last 4 polls)."""


def step_wait_ms(
    quiet_s: float,
    settings: KafkaSettings,
    *,
    expecting: bool = False,
    gap_s: float = 0.0,
    rate_per_s: float = 0.0,
) -> int:
    """The wait after `quiet_s` seconds without records: busy, idle or asleep.

    Busy, the wait is `fetch_wait_quiet_share` of the quiet or of the usual gap between
    records (`gap_s`), whichever is longer, between the busy wait and
    `fetch_wait_busy_max_ms`: the fetches between bursts cost a few answers, not one per
    busy wait. Records flowing at `rate_per_s` (a second) may also wait as long as the rate
    takes to bring `fetch_target_records`, within the same bounds: a fetch costs the same
    whatever it carries. On Tansu a record reaching an empty fetch waits for the fetch's
    next check (half its wait or less), on Apache Kafka not at all. `expecting`: the
    reader awaits records (a client with requests out), so it never idles.
    """
    if not expecting:
        if quiet_s >= settings.asleep_after_s:
            return settings.fetch_wait_asleep_ms
        if quiet_s >= settings.idle_after_s:
            return settings.fetch_wait_idle_ms
    busy = settings.fetch_wait_busy_ms
    cap = max(busy, min(settings.fetch_wait_busy_max_ms, settings.fetch_wait_idle_ms))
    grown = max(quiet_s, gap_s) * settings.fetch_wait_quiet_share
    if rate_per_s > 0:
        grown = max(grown, settings.fetch_target_records / rate_per_s)
    return max(busy, min(round(grown * 1000), cap))


RHYTHM_HISTORY = 12
"""Gaps between record-bearing polls kept to find a rhythm in."""
RHYTHM_MAX_LAG = 4
"""The longest repeat looked for, in polls: up to four producers on one period (workers
answering a batch per engine run, each into the same results topic)."""
RHYTHM_CHECKS = 6
"""A lag's predictions of the last this many gaps decide whether it holds."""


def rhythm_next_gap(
    gaps: Sequence[float], tolerance: float, *, max_lag: int = RHYTHM_MAX_LAG
) -> tuple[float, float] | None:
    """The next gap between record-bearing polls, and the mean error of the rule that
    predicts it, when the recent `gaps` repeat with a lag of 1 to `max_lag` polls: the
    gap `lag` polls before the next one. None when no lag predicts its last `RHYTHM_CHECKS`
    gaps within `tolerance` of their mean (Poisson arrivals never do).

    Two workers answering a batch every 225 ms with their phases 35 ms apart make gaps of
    35, 190, 35, 190, ...: a lag of 2 predicts them, a smoothed gap (112) predicts neither.
    The shortest lag that predicts best wins."""
    if tolerance <= 0 or not gaps:
        return None
    best: tuple[float, float] | None = None
    for lag in range(1, max_lag + 1):
        errors = [abs(gaps[k] - gaps[k - lag]) for k in range(lag, len(gaps))][-RHYTHM_CHECKS:]
        if len(errors) < RHYTHM_CHECKS:
            break
        error = sum(errors) / len(errors)
        if best is None or error < best[1]:
            best = (gaps[len(gaps) - lag], error)
    mean = sum(gaps) / len(gaps)
    if best is None or best[1] > tolerance * mean:
        return None
    return best


def rhythm_wait_ms(
    since_s: float, next_gap: tuple[float, float] | None, settings: KafkaSettings
) -> int | None:
    """The wait for a fetch built `since_s` after the last records when they come in a
    rhythm (`rhythm_next_gap`): until the predicted next burst plus the prediction's mean
    error and the busy wait, at most the idle wait. None when there is no rhythm or the
    burst is due within the busy cap (the traffic step covers that).

    Tansu checks an empty fetch at half its wait, three quarters, seven eighths, ...: a
    burst due near the end of the wait is answered within a few ms of landing, and the
    fetch is answered once, not empty every busy wait until then (docs/kafka.md)."""
    if next_gap is None:
        return None
    gap_s, error_s = next_gap
    until_s = gap_s - since_s
    if until_s * 1000 <= settings.fetch_wait_busy_max_ms:
        return None
    wait_s = until_s + error_s + settings.fetch_wait_busy_ms / 1000
    return min(round(wait_s * 1000), settings.fetch_wait_idle_ms)


def lane_waits(
    settings: KafkaSettings, *, batch_lane: bool = False, critical: bool = False
) -> KafkaSettings:
    """The fetch waits of one consumer: the process's; for a batch lane the same with the
    deeper asleep wait (`fetch_wait_asleep_batch_ms`); for a critical lane latency first:
    no gathering, and (unless `fetch_wait_critical_max_ms` is 0) the busy wait capped at
    it with the records rule off."""
    if critical:
        latency_first: dict[str, object] = {"fetch_gather_share": 0.0}
        if settings.fetch_wait_critical_max_ms > 0:
            latency_first["fetch_target_records"] = 0
            latency_first["fetch_wait_busy_max_ms"] = min(
                settings.fetch_wait_busy_max_ms, settings.fetch_wait_critical_max_ms
            )
        return settings.model_copy(update=latency_first)
    if batch_lane:
        return settings.model_copy(
            update={"fetch_wait_asleep_ms": settings.fetch_wait_asleep_batch_ms}
        )
    return settings


def gather_min_bytes(expected_records: float, bytes_per_record: float, share: float) -> int:
    """The least a fetch asks the broker to return: `share` of the records its wait is
    expected to bring, in bytes, when that is at least 2 records (1 byte otherwise: answer
    as soon as anything is there).

    Tansu, like Kafka, answers a fetch at once only when it already holds this much, and
    otherwise at its first check that does (half the wait, three quarters, ...) or at the
    wait's end: a record then waits up to the wait for company, and the hop makes one
    fetch and one produce per few records instead of per one or two.
    """
    records = int(expected_records * share)
    if records < 2 or bytes_per_record <= 0:
        return 1
    return max(1, round(records * bytes_per_record))


def record_bytes(records: Sequence[ConsumerRecord[bytes, bytes]]) -> int:
    """Keys and values of `records`, bytes (what a fetch's minimum counts, near enough)."""
    return sum(len(r.value or b"") + len(r.key or b"") for r in records)


def held_wait_ms(step_ms: int, needed_in_s: float | None, *, margin_ms: int, cap_ms: int) -> int:
    """The wait for a fetch built now when the reader needs records `needed_in_s` from now.

    None: it needs them as they come (`step_ms`). Otherwise the fetch may wait until
    `margin_ms` before they are needed, and returns with everything that arrived by then
    in one answer; never longer than `cap_ms`, never shorter than `step_ms`.
    """
    if needed_in_s is None:
        return step_ms
    held = round(needed_in_s * 1000) - margin_ms
    return max(step_ms, min(held, cap_ms))


class FetchPacer:
    """One consumer's fetch wait, asked afresh for every fetch its fetcher builds.

    Two inputs move it: the consumer's traffic (`observe` after every poll: from 5 ms
    while records flow, growing with the quiet up to the busy cap (40 ms), 200 ms after
    2 s without any, 500 ms after 30 s; see KafkaSettings) and its reader's demand
    (`hold_until`: a worker whose engine is busy cannot start on what it fetches before
    the engine frees, so a fetch may wait until just before then; `expecting`: a reader
    awaiting answers never idles). `gather`: ask each fetch for the records its wait should
    bring (ingest). `rhythm`: follow bursts that come in a rhythm (`rhythm_wait_ms`; ingest's
    interactive lane and the readers of results, not a worker, whose engine clock already
    holds its fetches), always or while the callable says so (a consumer's position check).
    `critical`: while it says so (a client with a critical request's result due), wait as a
    critical lane (`lane_waits`) and follow no rhythm.
    """

    def __init__(
        self,
        consumer: AIOKafkaConsumer,
        settings: KafkaSettings | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        expecting: Callable[[], bool] | None = None,
        gather: bool = False,
        rhythm: bool | Callable[[], bool] = False,
        critical: Callable[[], bool] | None = None,
    ) -> None:
        self._settings = settings or kafka_settings()
        self._critical_settings = lane_waits(self._settings, critical=True)
        self._critical = critical
        self._gather = gather
        self._rhythm: Callable[[], bool] = (
            rhythm if callable(rhythm) else (lambda: True) if rhythm else (lambda: False)
        )
        self._clock = clock
        self._consumer = consumer
        self._expecting = expecting
        self._last_records = clock()
        self._gap_s = 0.0
        """Smoothed time between polls that returned records (bursts' spacing)."""
        self._batch = 0.0
        """Smoothed records of those polls: over `_gap_s`, the stream's rate."""
        self._record_bytes = 0.0
        """Smoothed bytes a record (key and value) of those polls."""
        self._needed_at: float | None = None
        self._gaps: deque[float] = deque(maxlen=RHYTHM_HISTORY)
        """Recent gaps between polls that returned records (since the last idle spell)."""
        self._next_gap: tuple[float, float] | None = None
        """`rhythm_next_gap` of `_gaps`, found at each poll with records."""

    @property
    def settings(self) -> KafkaSettings:
        """The waits in force now: the consumer's, or a critical lane's while `critical`
        says a critical request's records are due (`lane_waits`)."""
        if self._critical is not None and self._critical():
            return self._critical_settings
        return self._settings

    @property
    def wait_ms(self) -> int:
        """The traffic step now: busy (grown with the quiet), idle or asleep."""
        expecting = self._expecting is not None and self._expecting()
        quiet_s = self._clock() - self._last_records
        return step_wait_ms(
            quiet_s, self.settings, expecting=expecting, gap_s=self._gap_s, rate_per_s=self.rate
        )

    @property
    def rate(self) -> float:
        """Records a second while they flow: smoothed records a poll over the smoothed gap
        (0 before any spacing is known). Back-to-back polls of a backlog do not spike it."""
        return self._batch / self._gap_s if self._gap_s > 0 else 0.0

    @property
    def idle(self) -> bool:
        return self.wait_ms > self.settings.fetch_wait_busy_max_ms

    def attach(self) -> bool:
        """Have the started consumer's fetcher ask `current_wait_ms` for each fetch.

        aiokafka's fetcher reads its `_fetch_max_wait_ms` attribute for every fetch request
        it builds and has no public setter; the attribute becomes a property that asks this
        pacer. If aiokafka ever changes that, the consumer keeps the busy wait it was built
        with (correct, only the saving is lost) and this says so.
        """
        fetcher = getattr(self._consumer, "_fetcher", None)
        if fetcher is None or "_fetch_max_wait_ms" not in vars(fetcher):
            log.warning("event=fetch_pacing_unavailable reason=aiokafka_fetcher_changed")
            return False
        fetcher.__class__ = _paced(type(fetcher))
        fetcher._inferbus_pacer = self
        return True

    def rhythm_ms(self) -> int | None:
        """The wait that lands a fetch just past the next burst of a rhythm, if this reader
        follows one and there is one further off than the busy cap (`rhythm_wait_ms`)."""
        if not self._rhythm() or (self._critical is not None and self._critical()):
            return None
        return rhythm_wait_ms(self._clock() - self._last_records, self._next_gap, self.settings)

    def current_wait_ms(self) -> int:
        """The wait for a fetch built now."""
        settings = self.settings
        step = self.wait_ms
        rhythm = self.rhythm_ms()
        if rhythm is not None:
            step = max(step, rhythm)
        needed_in = None if self._needed_at is None else self._needed_at - self._clock()
        return held_wait_ms(
            step,
            needed_in,
            margin_ms=settings.fetch_wait_busy_ms,
            cap_ms=settings.fetch_wait_idle_ms,
        )

    def current_min_bytes(self) -> int:
        """The least a fetch built now asks for: 1 byte, or with `gather`, while records
        flow and nothing holds the fetch, `gather_min_bytes` of what its wait should bring."""
        share = self.settings.fetch_gather_share
        if not self._gather or share <= 0 or self._needed_at is not None:
            return 1
        if self.rhythm_ms() is not None:  # the wait is set to land past the next burst
            return 1
        wait_ms = self.wait_ms
        if wait_ms > self.settings.fetch_wait_busy_max_ms:  # idle
            return 1
        return gather_min_bytes(self.rate * wait_ms / 1000, self._record_bytes, share)

    def observe(self, records: int, nbytes: int = 0) -> None:
        """Records the last poll returned (and their bytes): records end the quiet the wait
        grows with and add its length to the smoothed gap. Records after an idle spell
        start it afresh: the spell is no spacing of traffic, and what follows the first
        record is polled briskly."""
        if records:
            now = self._clock()
            gap = now - self._last_records
            if gap >= self.settings.idle_after_s:
                self._gap_s = self._batch = 0.0
                self._gaps.clear()
            else:
                self._gap_s += GAP_SMOOTHING * (gap - self._gap_s)
                self._batch += GAP_SMOOTHING * (records - self._batch)
                self._gaps.append(gap)
            self._next_gap = rhythm_next_gap(self._gaps, self.settings.fetch_rhythm_tolerance)
            if nbytes:
                size = nbytes / records
                self._record_bytes += GAP_SMOOTHING * (size - self._record_bytes)
            self._last_records = now

    def wake(self) -> None:
        """Expect records soon and want them (a handover, a start): poll briskly again."""
        self._last_records = self._clock()
        self._gap_s = self._batch = 0.0
        self._gaps.clear()
        self._next_gap = None
        self._needed_at = None

    def hold_until(self, needed_at: float | None) -> None:
        """The reader needs no records before `needed_at` (monotonic; None: as they come)."""
        self._needed_at = needed_at


_PACED: dict[type[Any], type[Any]] = {}


def _paced(fetcher_class: type[Any]) -> type[Any]:
    """`fetcher_class` with `_fetch_max_wait_ms` asked of the instance's pacer (one
    subclass per fetcher class)."""
    if fetcher_class in _PACED:
        return _PACED[fetcher_class]

    def wait(fetcher: Any) -> int:
        pacer: FetchPacer = fetcher._inferbus_pacer
        return pacer.current_wait_ms()

    def least(fetcher: Any) -> int:
        pacer: FetchPacer = fetcher._inferbus_pacer
        return pacer.current_min_bytes()

    def ignore(fetcher: Any, value: int) -> None:
        """The fetcher's own __init__ values: the pacer has its settings."""

    paced = type(
        f"Paced{fetcher_class.__name__}",
        (fetcher_class,),
        {
            "_fetch_max_wait_ms": property(wait, ignore),
            "_fetch_min_bytes": property(least, ignore),
        },
    )
    _PACED[fetcher_class] = _PACED[paced] = paced
    return paced

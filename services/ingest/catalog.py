"""Ingest's view of models (cached repository reads) and tier queue depths (lag)."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import OrderedDict, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, TopicPartition

from infra.kafka import committed_offsets, make_consumer
from infra.models.config import ModelConfig, ModelConfigError
from infra.models.repository import ModelRepository
from infra.tasks import cancel_and_wait, wait_event
from schemas.topics import TIERS, Tier, parse_request_topic, request_topic, worker_group

log = logging.getLogger(__name__)


MISSES_KEPT = 1024
"""Names that failed to resolve, remembered at most: producers choose the names, so a stream
of distinct bad ones must not grow ingest's memory (the oldest is forgotten first)."""


class CachedModelCatalog:
    """Model configs read from disk at most every `refresh_s`; errors are re-raised each time.

    A model.yaml that read well once and then does not (an edit half-written, a typo in a
    live file) keeps its last good config, as the workers do, with a warning each time the
    problem changes: every request for the model failing would punish its producers for an
    operator's mistake. A model whose folder is gone is gone at once.
    """

    def __init__(
        self,
        repository: ModelRepository,
        *,
        refresh_s: float,
        depths: QueueDepths,
        served_tiers: Iterable[Tier] = TIERS,
    ) -> None:
        self.repository = repository
        self.refresh_s = refresh_s
        self.depths = depths
        self.served_tiers = tuple(served_tiers)
        """The deployment's tiers: a model's config is narrowed to them (`served`)."""
        self._configs: dict[str, tuple[float, ModelConfig]] = {}
        self._misses: OrderedDict[str, tuple[float, Exception]] = OrderedDict()
        self._versions: dict[str, tuple[float, list[str]]] = {}
        self._problems: dict[str, str] = {}
        """Models served on their last good config: what is wrong with the file now."""

    def config(self, name: str) -> ModelConfig:
        now = time.monotonic()
        cached = self._configs.get(name) or self._misses.get(name)
        if cached is None or now - cached[0] > self.refresh_s:
            try:
                config = self.repository.config(name)
            except ModelConfigError as exc:
                kept = self._configs.get(name)
                if kept is None:
                    self._remember_miss(name, now, exc)
                    raise
                if self._problems.get(name) != str(exc):
                    log.warning(
                        "event=model_config_unreadable model=%s keeping=last_good error=%s",
                        name,
                        exc,
                    )
                self._problems[name] = str(exc)
                self._configs[name] = (now, kept[1])
                return kept[1]
            except Exception as exc:  # remembered and re-raised for every request
                self._configs.pop(name, None)
                self._problems.pop(name, None)
                self._remember_miss(name, now, exc)
                raise
            config = served(config, self.served_tiers)
            if self._problems.pop(name, None) is not None:
                log.info("event=model_config_readable model=%s", name)
            self._misses.pop(name, None)
            self._configs[name] = (now, config)
            return config
        if isinstance(cached[1], Exception):
            # Its old traceback dropped: raised again and again, it would keep growing.
            raise cached[1].with_traceback(None)
        return cached[1]

    def _remember_miss(self, name: str, now: float, exc: Exception) -> None:
        self._misses[name] = (now, exc)
        self._misses.move_to_end(name)
        while len(self._misses) > MISSES_KEPT:
            self._misses.popitem(last=False)

    def knows(self, name: str) -> bool:
        """Whether `name` resolved to a model the last time it was looked up."""
        return name in self._configs

    def has_version(self, name: str, version: str) -> bool:
        now = time.monotonic()
        cached = self._versions.get(name)
        if cached is None or now - cached[0] > self.refresh_s:
            cached = (now, self.repository.versions(name))
            self._versions[name] = cached
        return version in cached[1]

    def queue_depth(self, topic: str) -> int | None:
        self.depths.wanted(topic)
        return self.depths.depth(topic)

    def drain_rate(self, topic: str) -> float | None:
        return self.depths.drain_rate(topic)


def served(config: ModelConfig, tiers: tuple[Tier, ...]) -> ModelConfig:
    """`config` with only the tiers the deployment runs workers for: a request routed to
    another would wait in its topic for good."""
    if all(tier in tiers for tier in config.tiers):
        return config
    return config.model_copy(update={"tiers": [t for t in config.tiers if t in tiers]})


def projected_depth(
    at_read: int, routed_since: int, *, drained_per_s: float | None, elapsed_s: float
) -> int:
    """A queue's depth now, from its depth at the last read of the committed offsets.

    What was routed since is added, less what the workers drain at the rate they committed
    over the last interval; never below the read itself (a drain not seen yet is not
    assumed). Comparing live ends with committed offsets read up to a second earlier
    counted that second's traffic as queued: at 3,500 req/s with 256 requests outstanding
    the depth read 5,000 and ingest rejected requests at the interactive bound.
    """
    drained = (drained_per_s or 0.0) * elapsed_s
    return max(at_read, round(at_read + routed_since - drained))


def backlogged(
    depth: int, *, previous: int, was: bool, rate: float | None, interval_s: float
) -> bool:
    """Whether a tier's workers are working through a backlog, so that what they commit
    is their capacity: from when the queue grows until it is down to what they commit
    in one refresh.

    Not "while it grows": admission holds a backlog steady by rejecting the excess, and a
    steady backlog read as "they keep up" admitted everything until the next refresh saw
    it grow again (chaos overload: the queue reached 70 s of work against 30 s deadlines).
    """
    if depth > previous:
        return True
    return was and depth > (rate or 0.0) * interval_s


def drain_capacity(
    known: float | None,
    interval_rate: float | None,
    *,
    within_backlog: bool,
    rate_before: float | None,
    alpha: float = 0.5,
) -> float | None:
    """The workers' drain rate, smoothed over readings (`span_rate`) spent wholly in one
    backlog with the workers serving throughout.

    Only such a reading measures capacity: otherwise the workers committed what arrived,
    and a rate from a quiet spell read as capacity made the first reads of a burst predict
    minutes of wait (bench: 60 s requests rejected at the start of saturation). Outside a
    backlog, and at its first read, nothing is known.

    `interval_rate` is the rate since the last read that saw commits (`span_rate`; 0: none
    since the last read, None: no reading), `rate_before` the rate over the span that ended
    there (None: that read was the first to see commits since a start). A read in which
    they committed nothing says they were away (rejoining a broker that came back, a killed
    worker not yet replaced) or mid-batch, not what they serve; nor does the first read
    with commits after a start, which straddles their return. Read as capacity, a broker
    restart's 2 s rejoin priced the outage's backlog at ~0/s, floored to the rate served
    before it, and rejected requests served within 3 s (chaos broker-restart-client: 590
    queued "served at 21/s", drained at 156/s a second later).
    """
    if not within_backlog:
        return None
    if not interval_rate or not rate_before:  # none read, none committed, or just back
        return known
    return smoothed(known, interval_rate, alpha)


LUMPY_SPANS_KEPT = 4
"""Spans between reads that saw commits remembered, to tell a batch in progress from an
absence (`span_rate`)."""

LUMPY_SLACK_READS = 1.5
"""How many read intervals longer than the longest recent span a span may be and still be
read as batches: one for where a batch's commit falls between reads, half for the reads'
own jitter."""


@dataclass(frozen=True, slots=True)
class CommitSpan:
    """What a tier's workers committed from the last read that saw them commit to this one."""

    committed: int
    """Requests committed in the span."""
    span_s: float
    """Seconds from that read to this one."""
    reads: int
    """Reads in the span, this one included: 1 when the read before this one saw commits."""
    recent_s: tuple[float, ...] = ()
    """The spans before it, newest last (none: that read was the first to see commits
    since a start, so no span ended there)."""


def span_rate(span: CommitSpan, *, interval_s: float) -> float | None:
    """The drain rate over a span, or None where its reads without commits are more than
    batches in progress explain.

    A batch longer than the read interval commits only every few reads: a 512-token batch
    of the demo encoder takes 1.2-1.9 s against 0.5 s reads. Rated read by read, every read
    with commits followed one without and was refused as a return, so the capacity stayed
    at its first reading for the whole backlog ("served at 4/s" against ~25/s served: 517
    of 616 rejected), or was never known (admission by the queue bound alone: p99 17.7 s
    against 20 s deadlines). Over the span since the last read with commits, those reads
    count for what they are: one batch's time.

    An absence is a span longer than the batches explain: one read interval more than the
    longest of the recent spans (where a commit falls between reads), plus half of one for
    the reads' jitter. A killed worker's replacement or a group's rejoin makes one, and
    read as capacity it would price the backlog at its trickle (`drain_capacity`). With no
    span before it to compare, only adjacent reads are a reading.
    """
    if span.span_s <= 0:
        return None
    rate = span.committed / span.span_s
    if span.reads <= 1:
        return rate
    if not span.recent_s:  # nothing to compare the empty reads with
        return None
    if span.span_s > max(span.recent_s) + LUMPY_SLACK_READS * interval_s:
        return None  # an absence, not a batch
    return rate


@dataclass(frozen=True, slots=True)
class CommitMark:
    """The last read that saw a tier's workers commit: where the next span starts."""

    at_s: float
    committed: int
    rate: float
    """The rate over the span that ended here (or the interval, for a first mark)."""
    recent_s: tuple[float, ...]
    """The spans that ended here and before, newest last, at most `LUMPY_SPANS_KEPT`."""


def smoothed(known: float | None, reading: float, alpha: float = 0.5) -> float:
    """An exponentially smoothed rate: the reading alone when nothing is known yet."""
    return reading if known is None else alpha * reading + (1 - alpha) * known


def admission_rate(
    capacity: float | None, served: tuple[float, float] | None, *, now: float, memory_s: float
) -> float | None:
    """The drain rate admission predicts waits with: the measured capacity, but never less
    than what the workers served while they kept up within the last `memory_s`.

    A backlog's intervals measure capacity only while the workers are there: one whose
    only worker was killed measured the replacement's first trickle (1-7/s) and rejected
    requests with 25 s deadlines that it served within 2 s (chaos worker-kill). What they
    served before the backlog is a lower bound of what they can serve when back. Only
    where the capacity is known: a quiet spell's rate as a floor at a backlog's first read
    would be the quiet spell read as capacity (`drain_capacity`). After `memory_s` the
    measured capacity stands alone: workers gone that long are not coming back soon.
    """
    if capacity is None:
        return None
    if served is None or now - served[0] > memory_s:
        return capacity
    return max(capacity, served[1])


@dataclass(frozen=True, slots=True)
class _Reading:
    """One read's input to `drain_capacity`, and the span it covers (for the log)."""

    rate: float | None
    rate_before: float | None
    since_s: float | None
    """When the span it rates began (the last read for a read without commits)."""
    reads: int


def _rounded(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:.1f}"


KICKED_READ_GAP_S = 0.05
"""Reads kicked by requests routed to a topic never read are at least this far apart."""


class QueueDepths:
    """Lag of each tier topic's worker group: end offset - committed offset, per partition.

    End offsets come from ingest's own produce acks (exact on any broker), and from
    ListOffsets for partitions ingest has not written since it started.
    """

    def __init__(
        self,
        bootstrap: str,
        *,
        refresh_ms: int,
        active_for_s: float = 10.0,
        served_memory_s: float = 30.0,
    ) -> None:
        self.bootstrap = bootstrap
        self.refresh_s = refresh_ms / 1000
        self.active_for_s = active_for_s
        self.served_memory_s = served_memory_s
        """How long what the workers served while keeping up floors their drain rate."""
        self._routed_at: dict[str, float] = {}
        self._wanted_at: dict[str, float] = {}
        """When admission last asked for each topic's depth (routed or not)."""
        self._rates: dict[str, float | None] = {}
        """Drain capacity per topic while backlogged (`drain_capacity`)."""
        self._served: dict[str, tuple[float, float]] = {}
        """(when, rate): the workers' commit rate, smoothed over intervals that end
        outside a backlog (`admission_rate`). Kept by `forget`: a broker that lost its logs
        did not slow the workers down, and the requests produced while it was away make a
        backlog at its return that their reconnecting trickle would price at minutes."""
        self._last_committed: dict[str, tuple[float, int]] = {}
        self._marks: dict[str, CommitMark] = {}
        """The last read that saw commits, per topic: the start of the next span."""
        self._empty_reads: dict[str, int] = {}
        """Reads since the mark that saw no commits."""
        self._backlog_since: dict[str, float] = {}
        """When the read that found each topic's current backlog was taken."""
        self._last_depth: dict[str, int] = {}
        self._backlogged: dict[str, bool] = {}
        self._acked_end: dict[TopicPartition, int] = {}
        self._first_acked: dict[TopicPartition, int] = {}
        self._committed: dict[TopicPartition, int] = {}
        self._listed_end: dict[TopicPartition, int] = {}
        self._end_at_read: dict[TopicPartition, int] = {}
        """This ingest's acked end of each partition when its committed offset was read."""
        self._read_at: dict[str, float] = {}
        self._commit_rate: dict[str, float] = {}
        """Requests per second the workers committed between the last two reads."""
        self._in_flight: dict[str, int] = {}
        self._partitions: dict[str, set[TopicPartition]] = defaultdict(set)
        """The partitions of each topic acked or read: `depth` walks only its own topic's."""
        self._sums: dict[str, tuple[int, int, int]] = {}
        """`_partition_sums` of each topic, kept until an ack or a read changes what it sums:
        `depth` runs per routed request, and a poll's requests are routed between acks."""
        self._consumers: dict[str, AIOKafkaConsumer] = {}
        self._topics: set[str] = set()
        self._task: asyncio.Task[None] | None = None
        self._unread_routed = asyncio.Event()
        """A request was routed to a topic never read: the refresh loop runs at once."""
        self._reads_failing = False
        """The last refresh failed: a stale read is kept, not taken for unknown."""
        self._stale_kick_at = -math.inf

    def watch_models(self, models: list[str]) -> None:
        """Track the tier topics of these models."""
        self._topics.update(request_topic(m, t) for m in models for t in TIERS)

    def reserve(self, topic: str) -> None:
        """A request was routed to `topic` and is being produced: count it now, so that a
        poll's later requests see it before its ack arrives."""
        self._in_flight[topic] = self._in_flight.get(topic, 0) + 1
        self._routed_at[topic] = time.monotonic()
        if topic not in self._read_at:  # never read (a topic made since start): read it now
            self._unread_routed.set()

    def forget(self, topics: frozenset[str] | None = None) -> None:
        """The logs of `topics` (None: all) started over: what was known of the old ones
        says nothing now."""

        def gone(topic: str) -> bool:
            return topics is None or topic in topics

        for table in (
            self._acked_end,
            self._first_acked,
            self._committed,
            self._listed_end,
            self._end_at_read,
        ):
            for tp in [tp for tp in table if gone(tp.topic)]:
                del table[tp]
        for by_topic in (
            self._read_at,
            self._commit_rate,
            self._partitions,
            self._sums,
            self._last_committed,
            self._last_depth,
            self._rates,
            self._marks,
            self._empty_reads,
        ):
            for topic in [t for t in by_topic if gone(t)]:
                del by_topic[topic]

    def drain_rate(self, topic: str) -> float | None:
        """Requests per second the topic's workers commit while they work through a backlog
        (their capacity, floored by `admission_rate`); None when they keep up, or before
        two reads."""
        if not self._backlogged.get(topic):
            return None
        return admission_rate(
            self._rates.get(topic),
            self._served.get(topic),
            now=time.monotonic(),
            memory_s=self.served_memory_s,
        )

    def observe_ack(self, topic: str, partition: int, offset: int) -> None:
        """Record a produce ack: the partition's end is at least offset + 1."""
        self._in_flight[topic] = max(self._in_flight.get(topic, 0) - 1, 0)
        self._sums.pop(topic, None)
        tp = TopicPartition(topic, partition)
        self._partitions[topic].add(tp)
        if offset + 1 > self._acked_end.get(tp, 0):
            self._acked_end[tp] = offset + 1
        if offset < self._first_acked.get(tp, offset + 1):
            self._first_acked[tp] = offset

    def wanted(self, topic: str) -> None:
        """Admission is asking for `topic`'s depth: keep reading it, routed to or not.

        Reading only the topics routed to lately deadlocked an overloaded tier: every
        request rejected, so nothing routed, so after `active_for_s` its depth was no longer
        read and stayed at the figure that rejected them (seen live: "1715 queued, served at
        48/s" for 40 s after the workers had drained the topic).
        """
        self._wanted_at[topic] = time.monotonic()

    def release(self, topic: str) -> None:
        """A reserved request was not produced after all (the send failed)."""
        self._in_flight[topic] = max(self._in_flight.get(topic, 0) - 1, 0)

    def depth(self, topic: str) -> int | None:
        """Unconsumed requests on a tier topic, or None while nothing is known of it.

        A partition whose committed offset is known counts end - committed as of the last
        read of both (`projected_depth` carries it forward to now). One not read yet counts
        only what this ingest routed to it since it started (from its first ack): counting
        from offset 0 would take the partition's whole history for lag and reject every
        request as overloaded. A read older than `active_for_s` counts as none (admission
        lets the request through) and asks for a fresh one.
        """
        self._topics.add(topic)
        in_flight = self._in_flight.get(topic, 0)
        tps = self._partitions.get(topic)
        if not tps:
            return in_flight or None
        sums = self._sums.get(topic)
        if sums is None:
            sums = self._sums[topic] = self._partition_sums(tps)
        at_read, routed_since, ours = sums
        read_at = self._read_at.get(topic)
        elapsed = time.monotonic() - read_at if read_at is not None else 0.0
        if read_at is not None and elapsed > self.active_for_s and not self._reads_failing:
            # Not kept fresh (nothing routed or asked for a while): the last read may be a
            # flood's peak, long drained. Unknown until the read asked for here lands;
            # a depth never goes below its read (`projected_depth`), so after a drained
            # flood the first requests were refused on "4960 queued" (found in review).
            # While reads fail, the last one stands (admission stays shut, not open), and
            # a read is asked for at most once a refresh.
            now = time.monotonic()
            if now - self._stale_kick_at >= self.refresh_s:
                self._stale_kick_at = now
                self._unread_routed.set()
            return in_flight or None
        projected = projected_depth(
            at_read, routed_since, drained_per_s=self._commit_rate.get(topic), elapsed_s=elapsed
        )
        return in_flight + projected + ours

    def _partition_sums(self, tps: Iterable[TopicPartition]) -> tuple[int, int, int]:
        """(queued at the last read, routed since, routed to partitions not read yet)."""
        at_read = routed_since = ours = 0
        for tp in tps:
            committed = self._committed.get(tp)
            if committed is None:  # not read yet: what this ingest routed since it started
                if tp in self._acked_end:
                    ours += self._acked_end[tp] - self._first_acked[tp]
                continue
            end_at_read = max(self._end_at_read.get(tp, 0), self._listed_end.get(tp, 0))
            at_read += max(end_at_read - committed, 0)
            routed_since += max(self._acked_end.get(tp, 0) - end_at_read, 0)
        return at_read, routed_since, ours

    async def start(self) -> None:
        """Read every watched tier topic once, then keep those routed to or asked about fresh.

        The first read is done before ingest takes traffic: a partition not read yet counts
        all this ingest routed to it since it started (`depth`), so a fresh ingest under load
        would otherwise reject, until its first refresh, requests its workers had long
        consumed (measured: 333-960 of the first second's requests at the bus ceiling).
        """
        if self._task is not None:
            return
        try:
            await self.refresh(self._topics)
        except Exception as exc:  # the refresh loop retries; until then depths are partial
            log.warning("event=queue_depth_first_read_failed error=%r", exc)
        self._task = asyncio.create_task(self._run(), name="queue-depths")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)
        for consumer in self._consumers.values():
            await consumer.stop()
        self._consumers.clear()

    async def _run(self) -> None:
        while True:
            self._unread_routed.clear()  # a kick from here on (even mid-read) is kept
            try:
                await self.refresh()
                self._reads_failing = False
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the next refresh retries; depths keep their last value
                self._reads_failing = True
                log.warning("event=queue_depth_refresh_failed error=%r", exc)
            await asyncio.sleep(KICKED_READ_GAP_S)
            await wait_event(self._unread_routed, self.refresh_s)

    async def refresh(self, topics: Iterable[str] | None = None) -> None:
        """Re-read committed offsets (and listed ends) of `topics`; by default the tier
        topics routed to or asked about lately.

        An idle ingest reads nothing: depths only matter to the requests it routes.
        """
        by_group: dict[str, list[str]] = defaultdict(list)
        now = time.monotonic()
        if topics is None:
            topics = {
                topic
                for table in (self._routed_at, self._wanted_at)
                for topic, at in table.items()
                if now - at <= self.active_for_s
            }
        for topic in sorted(self._topics & set(topics)):
            parsed = parse_request_topic(topic)
            if parsed is not None:
                by_group[worker_group(*parsed)].append(topic)
        await asyncio.gather(*(self._refresh_group(g, t) for g, t in by_group.items()))

    async def _refresh_group(self, group: str, topics: list[str]) -> None:
        consumer = await self._consumer(group)
        for topic in topics:
            partitions = consumer.partitions_for_topic(topic)
            if partitions is None:
                await consumer.topics()
                partitions = consumer.partitions_for_topic(topic) or set()
            tps = [TopicPartition(topic, p) for p in sorted(partitions)]
            if not tps:
                continue
            ends = await consumer.end_offsets(tps)
            self._sums.pop(topic, None)
            self._listed_end.update(ends)
            self._read_at[topic] = time.monotonic()
            # The ends just before their committed offsets are read: what was routed after
            # is counted apart (`depth`), and a commit that lands during the read can only
            # make the pair err low.
            for tp in tps:
                self._end_at_read[tp] = self._acked_end.get(tp, 0)
            for tp, committed in (await committed_offsets(consumer, tps)).items():
                self._committed[tp] = committed if committed is not None else 0
                self._partitions[topic].add(tp)
            self._sums.pop(topic, None)
            committed = sum(self._committed[tp] for tp in tps)
            last = self._last_committed.get(topic)
            interval_rate = self._interval_rate(topic, committed)
            if interval_rate is not None:
                self._commit_rate[topic] = interval_rate
            depth = self.depth(topic) or 0
            was = self._backlogged.get(topic, False)
            now_backlogged = backlogged(
                depth,
                previous=self._last_depth.get(topic, depth),
                was=was,
                rate=self._rates.get(topic) or interval_rate,
                interval_s=self.refresh_s,
            )
            self._backlogged[topic] = now_backlogged
            self._last_depth[topic] = depth
            read_at = self._last_committed[topic][0]
            if not now_backlogged:
                self._backlog_since.pop(topic, None)
            elif not was or topic not in self._backlog_since:
                self._backlog_since[topic] = read_at
            read = self._span_reading(topic, committed, interval_rate, last)
            backlog_since = self._backlog_since.get(topic)
            known = self._rates.get(topic)
            capacity = self._rates[topic] = drain_capacity(
                known,
                read.rate,
                within_backlog=backlog_since is not None
                and read.since_s is not None
                and backlog_since <= read.since_s,
                rate_before=read.rate_before,
            )
            if log.isEnabledFor(logging.DEBUG):  # the span text is formatted before the call
                log.debug(
                    "event=drain_read topic=%s depth=%d backlogged=%s span_s=%s reads=%d "
                    "reading=%s rate_before=%s capacity_before=%s capacity=%s",
                    topic,
                    depth,
                    now_backlogged,
                    None if read.since_s is None else f"{read_at - read.since_s:.2f}",
                    read.reads,
                    _rounded(read.rate),
                    _rounded(read.rate_before),
                    _rounded(known),
                    _rounded(capacity),
                )
            # Every interval that ends keeping up, not only those wholly outside a backlog:
            # at a steady 20/s the depth's noise reads "growing" every other refresh, and
            # the floor went stale within 30 s (chaos worker-kill, full size: 44 rejected).
            if interval_rate is not None and not now_backlogged:
                served = self._served.get(topic)
                rate = smoothed(served[1] if served else None, interval_rate)
                self._served[topic] = (time.monotonic(), rate)

    def _span_reading(
        self,
        topic: str,
        committed: int,
        interval_rate: float | None,
        last: tuple[float, int] | None,
    ) -> _Reading:
        """What a read of `committed` in total gives `drain_capacity`: a read with commits
        reads the span since the last that saw some (`span_rate`) and starts the next."""
        if interval_rate is None or last is None:  # first read, or the offsets went back
            self._marks.pop(topic, None)
            self._empty_reads.pop(topic, None)
            return _Reading(None, None, last[0] if last else None, 1)
        if committed == last[1]:  # none this interval: away, or a batch still running
            self._empty_reads[topic] = self._empty_reads.get(topic, 0) + 1
            return _Reading(0.0, None, last[0], 1)
        now = self._last_committed[topic][0]
        reads = self._empty_reads.pop(topic, 0) + 1
        mark = self._marks.get(topic)
        if mark is None:  # the first commits since a start: they straddle the return
            self._marks[topic] = CommitMark(now, committed, interval_rate, ())
            return _Reading(interval_rate, None, last[0], reads)
        span = CommitSpan(committed - mark.committed, now - mark.at_s, reads, mark.recent_s)
        self._marks[topic] = CommitMark(
            now,
            committed,
            span.committed / span.span_s if span.span_s > 0 else interval_rate,
            (*mark.recent_s, span.span_s)[-LUMPY_SPANS_KEPT:],
        )
        return _Reading(span_rate(span, interval_s=self.refresh_s), mark.rate, mark.at_s, reads)

    def _interval_rate(self, topic: str, committed: int) -> float | None:
        """Requests per second committed since the last read (None: first read, or the
        offsets went back: a broker that lost its logs)."""
        now = time.monotonic()
        last = self._last_committed.get(topic)
        self._last_committed[topic] = (now, committed)
        if last is None or now <= last[0] or committed < last[1]:
            return None
        return (committed - last[1]) / (now - last[0])

    async def _consumer(self, group: str) -> AIOKafkaConsumer:
        consumer = self._consumers.get(group)
        if consumer is None:
            # Never subscribes: it only reads the group's committed offsets.
            consumer = make_consumer(
                bootstrap=self.bootstrap, group_id=group, client_id="inferbus-ingest-lag"
            )
            await consumer.start()
            self._consumers[group] = consumer
        return consumer

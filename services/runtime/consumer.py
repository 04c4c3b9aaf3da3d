"""A fetching consumer over the partitions this instance owns in some of its groups.

Every partition of the group topics is assigned and paused; the instance resumes the ones
it owns. Ownership follows `infra.assignment.balanced_assignment` of the live members read from
the registry (and the scaler's word on how many consume). A partition moves by handover:
the old owner stops reading it, answers what it holds, commits and releases it in its
record; only then does the new owner read it from the committed offset. Partitions
that do not move are never paused. The same consumer reads the registry and the
decisions (`control=True`) for the instance's other consumers too. One consumer per
priority class: a fetch answers only when the records already fetched are consumed, so a
backlog of batch records must never sit in front of an interactive one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence, Set
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.errors import KafkaConnectionError, KafkaError

from infra.gaps import GapGuard, admit_in_order
from infra.kafka import make_consumer, read_from_start, start_with_retry
from infra.log_end import LogEndProbe
from infra.pacing import FetchPacer, lane_waits, record_bytes
from infra.settings import kafka_settings
from infra.stalls import StallWatch
from infra.tasks import cancel_and_wait, within
from schemas.errors import InferbusError
from schemas.topics import DECISIONS, INSTANCES, ROLLOUTS
from services.runtime.committer import Committer
from services.runtime.membership import Membership
from services.runtime.offsets import OffsetTracker
from services.runtime.ownership import active_members, claims_of, handover, target_for

log = logging.getLogger(__name__)

Drain = Callable[[str, frozenset[int]], Awaitable[None]]
"""(topic, partitions) -> returns once every record of theirs in hand is answered."""
LetGo = Callable[[str, frozenset[int]], int]
"""(topic, partitions) -> drops their records not yet started (the next owner reads them
again; commits stop short of them); returns how many."""
CONTROL_TOPICS = (INSTANCES, DECISIONS, ROLLOUTS)
WHOLE_CONTROL_TOPICS = (ROLLOUTS,)
"""Read from their start, not the recent window: one record per key is the state (rare,
compacted), and a decision stays in force however old it is."""


def fair_shares(
    buffered: Sequence[TopicPartition], limit: int, turn: int
) -> list[tuple[TopicPartition, int]]:
    """How many records to take from each partition with records buffered: `limit` split
    evenly, the remainder (and, with fewer records than partitions, the whole take) to
    the partitions whose turn it is (`turn` rotates the start).

    aiokafka hands out buffered records partition by partition in the order they were
    fetched and fetches a partition again only once its buffer is drained, so a reader
    with room for a few records at a time works through one partition's chunk before the
    next: under a backlog the queue is served by chunks in turn, not oldest first, and a
    request waited longer than depth / rate (chaos overload: admitted requests answered
    `deadline_exceeded` 5 s past their deadline, in bursts; docs/reliability.md). Ingest
    spreads requests over the partitions evenly, so equal shares keep their oldest
    records about equally old.
    """
    count = len(buffered)
    if count == 0 or limit <= 0:
        return []
    start = turn % count
    order = [*buffered[start:], *buffered[:start]]
    base, extra = divmod(limit, count)
    shares = [(tp, base + (1 if i < extra else 0)) for i, tp in enumerate(order)]
    return [(tp, share) for tp, share in shares if share > 0]


def records_behind(
    at_rest: Mapping[TopicPartition, int],
    ends: Mapping[TopicPartition, int],
    positions: Mapping[TopicPartition, int],
    delivered: Set[TopicPartition],
) -> tuple[dict[TopicPartition, int | None], dict[TopicPartition, int]]:
    """(where to seek, None meaning the log's beginning; the ends now seen at rest).

    A partition none of whose records came during the interval, whose end moved past the
    end last seen at rest while our position is past the new end, has records behind our
    position: read on from the end seen at rest. One whose end went back below the end
    seen at rest started over (an end never goes back on a kept log): read it from its
    beginning. An end is seen at rest when none of its records came in the interval
    before it (an end can lag records a fetch already returned).

    An end short of our position alone says nothing: Tansu reports a log's end as its
    last batch's first offset + 1, short of a position inside a batch of many records."""
    seeks: dict[TopicPartition, int | None] = {}
    rest: dict[TopicPartition, int] = {}
    for tp, end in ends.items():
        if tp in delivered:
            continue
        before = at_rest.get(tp)
        if before is not None and end < before and end < positions[tp]:
            seeks[tp] = None
        elif before is not None and before < end < positions[tp]:
            seeks[tp] = before
        else:
            rest[tp] = end
    return seeks, rest


class MissingTopic(InferbusError):
    """A topic this instance consumes does not exist."""


@dataclass
class _Group:
    group: str
    topic: str
    partitions: int
    committer: Committer
    owned: set[int] = field(default_factory=set)
    releasing: set[int] = field(default_factory=set)


@dataclass(frozen=True)
class ConsumerOptions:
    """How the owned consumer polls and hands partitions over."""

    max_poll_records: int = 512
    rebalance_every_s: float = 0.25
    """How often ownership is re-checked without news (leases run out silently)."""
    drain_timeout_s: float = 10.0
    """A partition being released waits at most this for its in-hand records."""
    control_window_s: float = 30.0
    """How far back the registry and decisions are read at start, seconds."""
    position_check_s: float = 5.0
    """How often owned partitions' positions are checked against their logs' ends."""
    commit_interval_s: float = 0.1
    """Commits coalesce: at most one per this interval while records flow (every commit is
    a broker request; a crash repeats at most this much, which at-least-once allows)."""
    commit_timeout_s: float = 2.0
    """A commit not answered within this counts as failed, and the next is asked whether the
    broker kept its logs first: aiokafka retries a commit until a broker answers, and one
    sent to a broker that went away landed on the fresh one that replaced it, with the old
    log's offsets."""
    gather: bool = False
    """While records flow, each fetch asks the broker for about as many as its wait is
    expected to bring (`FetchPacer`, `fetch_gather_share`): fewer, fuller fetches for a
    hop that can wait a few ms (ingest), not for one that waits on results."""
    rhythm: bool = False
    """Follows bursts that come in a rhythm (`FetchPacer`, `fetch_rhythm_tolerance`): a
    fetch waits past the next one instead of coming back empty every busy wait. For a hop
    that hands records on at once (ingest), not one whose engine holds its fetches."""
    batch_lane: bool = False
    """Reads only the batch tier: asleep, it waits `fetch_wait_asleep_batch_ms` a fetch
    (fewer fetches for the broker to answer; batch requests can wait a second)."""
    critical: bool = False
    """Reads only the critical tier: latency first (`lane_waits`: a short busy cap, the
    records rule off, no gathering), for more fetches while critical records flow. Not
    with `gather`, `rhythm` or `batch_lane`: a critical lane never waits for company."""

    def __post_init__(self) -> None:
        if self.critical and (self.gather or self.rhythm or self.batch_lane):
            raise ValueError(
                "a critical lane waits latency first: it cannot also gather, follow a "
                "rhythm or be a batch lane"
            )


class OwnedConsumer:
    """Polls the owned partitions of every group; hands partitions over as members change."""

    def __init__(
        self,
        bootstrap: str,
        *,
        client_id: str,
        membership: Membership,
        groups: Sequence[tuple[str, str]],
        offsets: OffsetTracker,
        drain: Drain,
        let_go: LetGo | None = None,
        control: bool = True,
        options: ConsumerOptions | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        self.client_id = client_id
        self.membership = membership
        self.offsets = offsets
        self.options = options or ConsumerOptions()
        self._drain = drain
        self._let_go = let_go
        self._group_topics = list(groups)
        self._control_topics = CONTROL_TOPICS if control else ()
        self._seen_version = -1
        self._control: tuple[TopicPartition, ...] = ()
        self._last_position_check = time.monotonic()
        self._checking_positions = False
        self._seen_restarts = 0
        self._seen_lapses = 0
        """The membership's lapses this consumer has fenced for."""
        self._ends: dict[TopicPartition, int] = {}
        self._delivered: set[TopicPartition] = set()
        self.gaps = GapGuard()
        """Holds back what follows a batch the broker shows out of order (infra/gaps.py)."""
        self.standing_by = False
        """Serving but told to stand by (the scaler's word keeps it warm, not consuming)."""
        self._groups: list[_Group] = []
        self._consumer: AIOKafkaConsumer | Any = None
        self.pacer: FetchPacer | None = None
        self._held: set[str] = set()
        self._last_rebalance = 0.0
        self._turn = 0
        """Rotates which buffered partition a poll takes from first (`fair_shares`)."""
        self._unfair_said = False
        self._releases: set[asyncio.Task[None]] = set()
        self._commit_wanted = asyncio.Event()
        self._check_commits = False
        self._log_ends = LogEndProbe(bootstrap, client_id=self.client_id)
        """Tells a position inside a log's last batch from one past the log."""
        self._committing: asyncio.Task[None] | None = None
        self._rebalance_lock = asyncio.Lock()
        self._started = False
        self._closed = False
        self.stall_watch = StallWatch(f"poll client={client_id}")
        """Names the awaits of a poll that has not come back within 10 s."""
        self._watching: asyncio.Task[None] | None = None
        self._restore: dict[str, frozenset[int]] | None = None
        """The partitions a failed rebuild is to take back (None: no rebuild pending)."""

    # ---- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        """Connect, hold every data partition paused, read the recent registry (idempotent)."""
        if self._started:
            return
        self._started = True
        consumer = await self._open_consumer()
        counts = await self._partition_counts(
            [topic for _, topic in self._group_topics] + list(self._control_topics)
        )
        for group, topic in self._group_topics:
            committer = Committer(
                self.bootstrap, group=group, topic=topic, client_id=self.client_id
            )
            await committer.start(counts[topic])
            self._groups.append(_Group(group, topic, counts[topic], committer))
        data = [TopicPartition(g.topic, p) for g in self._groups for p in range(g.partitions)]
        control = [TopicPartition(t, p) for t in self._control_topics for p in range(counts[t])]
        self._control = tuple(control)
        consumer.assign(data + control)
        consumer.pause(*data)
        if control:
            await self._seek_recent(control)
        self._committing = asyncio.create_task(self._commit_loop(), name="commits")

    async def _open_consumer(self) -> AIOKafkaConsumer:
        """A started consumer with its own fetch pacing and order guard, as `_consumer`."""
        consumer = self._consumer = make_consumer(
            bootstrap=self.bootstrap,
            group_id=None,
            client_id=self.client_id,
            max_poll_records=self.options.max_poll_records,
        )
        waits = lane_waits(
            kafka_settings(), batch_lane=self.options.batch_lane, critical=self.options.critical
        )
        self.pacer = FetchPacer(
            consumer,
            waits,
            gather=self.options.gather,
            rhythm=partial(self._may_park, waits.fetch_wait_idle_ms / 1000)
            if self.options.rhythm
            else False,
        )
        self.gaps = GapGuard()
        await start_with_retry(consumer.start, what=f"consumer-{self.client_id}")
        self.pacer.attach()
        return consumer

    def _may_park(self, longest_park_s: float) -> bool:
        """Whether a fetch may wait past the next burst of a rhythm now (`rhythm`): not
        while the poll waits on its position check's broker requests, nor in the longest
        park before one. The broker answers a connection's requests in order, so each of
        those requests waited for the parked fetch ahead of it while the poll, and the
        burst it had fetched, waited for them: a whole burst ~165 ms late every
        `position_check_s` (`scripts/critical_lane_probe.py`)."""
        if self._checking_positions:
            return False
        due_in_s = self._last_position_check + self.options.position_check_s - time.monotonic()
        return due_in_s > longest_park_s

    async def _partition_counts(self, topics: list[str]) -> dict[str, int]:
        await self._consumer.topics()
        counts: dict[str, int] = {}
        for topic in topics:
            found = self._consumer.partitions_for_topic(topic)
            if not found:
                raise MissingTopic(
                    f"topic {topic!r} does not exist; create the topics first "
                    "(`inferbus topics create`, or `inferbus up` does it)",
                    topic=topic,
                )
            counts[topic] = len(found)
        return counts

    async def _seek_recent(self, tps: list[TopicPartition]) -> None:
        whole = [tp for tp in tps if tp.topic in WHOLE_CONTROL_TOPICS]
        if whole:
            read_from_start(self._consumer, *whole)
        tps = [tp for tp in tps if tp.topic not in WHOLE_CONTROL_TOPICS]
        if not tps:
            return
        since_ms = int((time.time() - self.options.control_window_s) * 1000)
        found = await self._consumer.offsets_for_times(dict.fromkeys(tps, since_ms))
        for tp in tps:
            hit = found.get(tp)
            if hit is not None and hit.timestamp is not None and hit.timestamp >= 0:
                self._consumer.seek(tp, hit.offset)
            else:
                await self._consumer.seek_to_end(tp)

    async def close(self) -> None:
        """Stop reading, answer what is in hand, commit, release every partition; idempotent.

        The caller publishes `draining` before and `gone` after.
        """
        if self._closed or not self._started:
            return
        self._closed = True
        if self._watching is not None:
            await cancel_and_wait(self._watching)
        tasks = list(self._releases)
        for group in self._groups:
            parts = frozenset(group.owned - group.releasing)
            if parts:
                tasks.append(self._start_release(group, parts))
        for outcome in await asyncio.gather(*tasks, return_exceptions=True):
            if isinstance(outcome, Exception):  # the rest of the close goes on regardless
                log.warning("event=release_failed client=%s error=%r", self.client_id, outcome)
        if self._committing is not None:
            await cancel_and_wait(self._committing)
        try:
            await self._commit_now()
        except (KafkaError, TimeoutError) as exc:  # the next owner repeats what is not
            log.warning("event=final_commit_failed error=%r", exc)
        for group in self._groups:
            await group.committer.stop()
        await self._log_ends.close()
        await self._consumer.stop()

    # ---- polling -----------------------------------------------------------------------

    async def poll(
        self, timeout_ms: int, max_records: int | None = None
    ) -> list[ConsumerRecord[bytes, bytes]]:
        """The next data records (registry and decision records are folded on the way)."""
        if self._watching is None:
            self._watching = asyncio.create_task(self.stall_watch.run(), name="stall-watch")
        self.stall_watch.begin()
        try:
            return await self._poll(timeout_ms, max_records)
        finally:
            self.stall_watch.end()

    async def _poll(
        self, timeout_ms: int, max_records: int | None
    ) -> list[ConsumerRecord[bytes, bytes]]:
        limit = self.options.max_poll_records
        if self._restore is not None:  # the last rebuild failed: try again before anything
            await self._rebuild()
        fenced = self.membership.lapsed_since(self._seen_lapses)
        if fenced:
            await self._fence()
        try:
            await self._read_control()
            batches = await self._take(timeout_ms, min(max_records or limit, limit))
        except KafkaError as exc:
            # aiokafka's fetcher died (it does not come back by itself): a fresh consumer
            # takes the same partitions from their committed offsets.
            log.warning(
                "event=consumer_broken client=%s error=%r (rebuilding)", self.client_id, exc
            )
            await self._rebuild()
            return []
        batches = admit_in_order(self._consumer, self.gaps, batches, time.monotonic())
        records: list[ConsumerRecord[bytes, bytes]] = []
        self._delivered.update(batches)
        for tp, batch in batches.items():
            if tp.topic in CONTROL_TOPICS:
                for record in batch:
                    self.membership.observe(tp.topic, record.key, record.value)
            elif not fenced:
                records.extend(batch)
        assert self.pacer is not None
        self.pacer.observe(len(records), record_bytes(records))
        try:
            await self._tend_ownership_and_logs()
        except Exception as exc:  # the records are taken: they go out, whatever failed here
            log.error(
                "event=consumer_housekeeping_failed client=%s error=%r (tried again later)",
                self.client_id,
                exc,
            )
        return records

    async def _tend_ownership_and_logs(self) -> None:
        """A poll's housekeeping, after its records are taken: hand partitions over when
        members changed, check positions against the logs' ends, read again the logs a
        broker restarted. It runs after the take, so what it costs does not delay records;
        what fails in it is said and done again at its next turn, never costing the records
        already taken (the position has moved past them: dropped, they would be lost and
        committed past)."""
        now = time.monotonic()
        news = self.membership.version != self._seen_version
        if news or now - self._last_rebalance >= self.options.rebalance_every_s:
            self._seen_version = self.membership.version
            self._last_rebalance = now
            await self.rebalance()
        if now - self._last_position_check >= self.options.position_check_s:
            self._last_position_check = now
            self._checking_positions = True
            try:
                if await self._overrun():
                    self.membership.logs_restarted(None)
                else:
                    await self._catch_up_behind_position()
            finally:
                self._checking_positions = False
        if self.membership.broker_restarts != self._seen_restarts:
            restarted = self.membership.restarted_since(self._seen_restarts)
            await self._read_again(restarted)
            self._seen_restarts = self.membership.broker_restarts

    async def _take(
        self, timeout_ms: int, limit: int
    ) -> dict[TopicPartition, list[ConsumerRecord[bytes, bytes]]]:
        """Up to `limit` buffered data records, shared evenly among the partitions that have
        some (`fair_shares`); the room a partition with fewer than its share leaves goes to
        those that filled theirs, in the same turn order, so a poll is not smaller than its
        room while records are buffered (an engine's batch under a backlog). When at most
        one partition has records, what the fetcher gives, waiting up to `timeout_ms`."""
        buffered = self._buffered_data()
        if len(buffered) < 2:
            batches: dict[
                TopicPartition, list[ConsumerRecord[bytes, bytes]]
            ] = await self._consumer.getmany(timeout_ms=timeout_ms, max_records=limit)
            return batches
        batches = {}
        filled: list[TopicPartition] = []
        for tp, share in fair_shares(buffered, limit, self._turn):
            got = (await self._consumer.getmany(tp, timeout_ms=0, max_records=share)).get(tp)
            if got:
                batches[tp] = got
                if len(got) == share:
                    filled.append(tp)
        room = limit - sum(len(records) for records in batches.values())
        for tp in filled:
            if room <= 0:
                break
            more = (await self._consumer.getmany(tp, timeout_ms=0, max_records=room)).get(tp)
            if more:
                batches[tp] = [*batches[tp], *more]
                room -= len(more)
        self._turn += 1
        return batches

    def _buffered_data(self) -> list[TopicPartition]:
        """The data partitions with fetched records not handed out yet, in the order
        aiokafka would hand them out (its fetcher's private buffer; if aiokafka changes it,
        none are seen and polls take what the fetcher gives, as before)."""
        records = getattr(getattr(self._consumer, "_fetcher", None), "_records", None)
        if not isinstance(records, Mapping):
            if not self._unfair_said:  # correct, only unfair under a backlog: said once
                self._unfair_said = True
                log.warning("event=fair_polls_unavailable reason=aiokafka_fetcher_changed")
            return []
        return [tp for tp in records if tp.topic not in CONTROL_TOPICS]

    async def _read_control(self) -> None:
        """Fold the registry, decision and rollout records fetched so far, asked for apart
        from the data and first.

        aiokafka hands out buffered records partition by partition in the order they were
        fetched, so under a backlog, with `max_records` the engine's little room, the data
        partitions' buffers came first for seconds on end: the registry view went stale,
        the others' leases seemed to lapse, and a backlogged worker took partitions their
        owners still served (seen live: two MiniLM workers both owning all 12 partitions
        after a scale-out under overload).
        """
        if not self._control:
            return
        batches = await self._consumer.getmany(*self._control, timeout_ms=0)
        batches = admit_in_order(self._consumer, self.gaps, batches, time.monotonic())
        self._delivered.update(batches)
        for tp, batch in batches.items():
            for record in batch:
                self.membership.observe(tp.topic, record.key, record.value)

    async def tend(self) -> None:
        """Between polls (the caller is not fetching data): read the registry and the
        decisions fetched meanwhile, give up partitions if the lease lapsed, and follow
        what is known of the group's membership."""
        if self._restore is not None:  # no consumer to read with: the next poll rebuilds it
            return
        try:
            await self._read_control()
        except KafkaError as exc:  # the next poll rebuilds a broken consumer
            log.warning("event=control_read_failed client=%s error=%r", self.client_id, exc)
        if self.membership.lapsed_since(self._seen_lapses):
            await self._fence()
            return
        now = time.monotonic()
        if now - self._last_rebalance >= self.options.rebalance_every_s:
            self._seen_version = self.membership.version
            self._last_rebalance = now
            await self.rebalance()

    def hold_fetches_until(self, needed_at: float | None) -> None:
        """The reader cannot use records before `needed_at` (monotonic; None: as they come):
        fetches may wait until just before then (infra.pacing)."""
        if self.pacer is not None:
            self.pacer.hold_until(needed_at)

    async def _overrun(self) -> bool:
        """Whether the broker lost its state, as far as can be told now (`_logs_lost`)."""
        try:
            return await self._logs_lost() is True
        except (KafkaError, TimeoutError):
            return False  # the broker is away; asked again next round

    async def _logs_lost(self) -> bool | None:
        """Whether the registry's or the decisions' log ends before our position: the
        broker lost its state and counts offsets from 0 again (Tansu does not say so; it
        returns nothing). None: cannot tell now (a control topic the broker does not know
        yet, or a last batch that could not be read). False for a consumer without control
        partitions. Raises the broker's error.

        Tansu reports a log's end as its last batch's first offset + 1, so a position inside
        a batch of several records is past the reported end without any restart (seen live:
        a registry batch of two records, position 526 against a reported end of 525, read
        every log again). A position past the reported end is only a suspect: the last
        batch is read, and only a position past its last offset counts.
        """
        tps = list(self._control)
        if not tps:
            return False
        # Only partitions the broker knows now: one it lost (not re-created yet) would fail
        # the whole ListOffsets request.
        cluster = self._consumer._client.cluster
        known = [tp for tp in tps if tp.partition in (cluster.partitions_for_topic(tp.topic) or ())]
        ends = await self._consumer.end_offsets(known) if known else {}
        positions = {tp: await within(self._consumer.position(tp), 1.0) for tp in ends}
        suspects = {tp: end for tp, end in ends.items() if positions[tp] > end}
        verdict = await self._log_ends.judge(suspects, positions)
        for tp in verdict.past:
            log.warning(
                "event=broker_lost_its_logs topic=%s partition=%d position=%d end=%d",
                tp.topic,
                tp.partition,
                positions[tp],
                suspects[tp],
            )
            return True
        if verdict.unknown:
            return None
        return None if len(known) < len(tps) else False

    async def _catch_up_behind_position(self) -> None:
        """Records written behind our position: nothing of a partition came to us and our
        position is past its log's end. A broker that lost its logs does this (Tansu keeps
        records produced to a topic it no longer knows, then numbers the re-created
        topic's records from a lower offset), and so does an offset committed to a fresh
        broker from the old one's count (a commit retried across the restart; seen live:
        a worker took a partition at committed 55 whose new log ended at 10, and skipped
        those 10 requests). Read on from the end seen at rest, or the whole log when
        there is none below (a repeat at worst).

        An end counts as seen at rest when nothing of its partition came in the whole
        check interval before it: a log's end can lag the records a fetch already
        returned, and a stale end would look like records behind us."""
        tps = [
            TopicPartition(g.topic, p)
            for g in self._groups
            for p in g.owned - g.releasing
            if g.topic not in self._held
        ]
        delivered, self._delivered = self._delivered, set()
        try:
            ends = await self._consumer.end_offsets(tps) if tps else {}
            positions = {tp: await within(self._consumer.position(tp), 1.0) for tp in tps}
        except (KafkaError, TimeoutError):
            return  # the broker is away; asked again next round
        seeks, self._ends = records_behind(self._ends, ends, positions, delivered)
        suspects = {
            tp: end
            for tp, end in ends.items()
            if tp not in delivered and tp not in seeks and positions[tp] > end
        }
        # A position from an earlier log: an offset committed to a broker that came back
        # without its logs (seen live: a worker took a partition at 55 whose new log ended
        # at 10, and never read those 10).
        for tp in (await self._log_ends.judge(suspects, positions)).past:
            seeks[tp] = None
        for tp, offset in seeks.items():
            log.warning(
                "event=records_behind_position topic=%s partition=%d position=%d end=%d "
                "from=%s (reading them)",
                tp.topic,
                tp.partition,
                positions[tp],
                ends[tp],
                "beginning" if offset is None else offset,
            )
            if offset is None:
                read_from_start(self._consumer, tp)
            else:
                self._consumer.seek(tp, offset)

    async def _read_again(self, topics: frozenset[str] | None) -> None:
        """The logs of `topics` (None: every log) are new: read the partitions held of them
        from their beginning. What was read of the new logs already comes again (answers
        repeat; clients drop repeats by id), and nothing written since is skipped. Other
        topics' partitions go on where they were: a new model's topics being made must
        not replay every other log."""
        held = [
            TopicPartition(g.topic, p) for g in self._groups for p in g.owned - g.releasing
        ] + list(self._control)
        tps = [tp for tp in held if topics is None or tp.topic in topics]
        log.warning(
            "event=reading_from_the_start partitions=%d topics=%s",
            len(tps),
            "all" if topics is None else ",".join(sorted(topics)),
        )
        for tp in tps:
            self.offsets.forget(tp.topic, tp.partition)
        if tps:
            read_from_start(self._consumer, *tps)

    async def _rebuild(self) -> None:
        """A fresh consumer in place of a broken one, holding the same partitions from their
        committed offsets. One that cannot start (the broker still away) raises, and the
        next poll tries again with the partitions it was to hold: a consumer left unstarted
        would fail every poll with an error no rebuild follows, its partitions held by an
        instance that does not read them."""
        with contextlib.suppress(Exception):  # it is broken: only its closing is at stake
            await self._consumer.stop()
        if self._restore is None:
            self._restore = {g.group: frozenset(g.owned - g.releasing) for g in self._groups}
            for group in self._groups:
                group.owned -= self._restore[group.group]
        consumer = await self._open_consumer()
        data = [TopicPartition(g.topic, p) for g in self._groups for p in range(g.partitions)]
        consumer.assign(data + list(self._control))
        consumer.pause(*data)
        if self._control:
            await self._seek_recent(list(self._control))
        restore, self._restore = self._restore, None
        for group in self._groups:
            if restore.get(group.group):
                await self._acquire(group, restore[group.group])

    def hold(self, topics: set[str]) -> None:
        """Stop reading these topics' owned partitions until released (backpressure)."""
        self._held = set(topics)
        self._apply_pauses()

    def _apply_pauses(self) -> None:
        pause: list[TopicPartition] = []
        resume: list[TopicPartition] = []
        for group in self._groups:
            for partition in range(group.partitions):
                tp = TopicPartition(group.topic, partition)
                reading = (
                    partition in group.owned
                    and partition not in group.releasing
                    and group.topic not in self._held
                )
                (resume if reading else pause).append(tp)
        self._consumer.pause(*pause)
        self._consumer.resume(*resume)

    def owned(self, topic: str) -> frozenset[int]:
        """Partitions of `topic` this instance reads now."""
        for group in self._groups:
            if group.topic == topic:
                return frozenset(group.owned - group.releasing)
        return frozenset()

    # ---- ownership ---------------------------------------------------------------------

    async def rebalance(self) -> None:
        """Move toward this instance's share: release what is no longer its own, take what
        no other live member claims."""
        if self._closed or self.membership.lapsed_since(self._seen_lapses):
            return  # a lapsed lease takes nothing until it fenced and its record is fresh
        async with self._rebalance_lock:
            me = self.membership.identity.instance_id
            standing_by = bool(self._groups)
            for group in self._groups:
                members = self.membership.members(group.group, group.topic)
                desired = self.membership.desired(group.group)
                standing_by &= me not in active_members(members, desired)
                target = target_for(me, group.partitions, members, desired)
                step = handover(me, frozenset(group.owned), target, claims_of(members, me))
                release = step.release - group.releasing
                if release:
                    self._start_release(group, release)
                if step.acquire:
                    await self._acquire(group, step.acquire)
            if standing_by != self.standing_by:
                self.standing_by = standing_by
                log.info("event=standby instance=%s standby=%s", me, standing_by)

    async def _acquire(self, group: _Group, parts: frozenset[int]) -> None:
        try:
            committed = await group.committer.committed(parts)
        except KafkaError as exc:
            log.warning("event=acquire_failed group=%s error=%r (retried)", group.group, exc)
            return
        for partition, offset in committed.items():
            tp = TopicPartition(group.topic, partition)
            self.offsets.forget(group.topic, partition)
            self.gaps.forget(tp)
            if offset is None:
                read_from_start(self._consumer, tp)
            else:
                self._consumer.seek(tp, offset)
            group.owned.add(partition)
        self._apply_pauses()
        if self.pacer is not None:
            self.pacer.wake()
        log.info(
            "event=partitions_acquired group=%s partitions=%s from=%s",
            group.group,
            sorted(parts),
            {p: committed[p] for p in sorted(parts)},
        )
        await self._publish_owned(group)

    async def _fence(self) -> None:
        """The lease lapsed: others may own our partitions by now. Stop reading them at
        once, let go of what has not started (no commit: the next owner reads on from the
        last one), and publish a fresh record owning nothing; ownership starts over by
        handover. What is in the engine is still answered (a repeat at worst)."""
        held = {g.group: frozenset(g.owned) for g in self._groups if g.owned}
        if not held:
            self._seen_lapses = self.membership.lapses
            return  # nothing to give up; the refresh loop renews the lease
        log.warning(
            "event=lease_lapsed instance=%s partitions=%s (not reading them until the "
            "record is fresh; they are handed over again)",
            self.membership.identity.instance_id,
            {group: sorted(parts) for group, parts in held.items()},
        )
        for group in self._groups:
            parts = frozenset(group.owned)
            if self._let_go is not None and parts:
                self._let_go(group.topic, parts)
            for partition in parts:
                self.offsets.forget(group.topic, partition)
            group.owned.clear()
            group.releasing.clear()
            self.membership.owned[group.topic] = frozenset()
        self._apply_pauses()
        try:
            await self.membership.publish()
        except KafkaError as exc:  # the refresh loop keeps trying
            log.warning("event=fenced_publish_failed error=%r", exc)
        self._seen_lapses = self.membership.lapses

    def _start_release(self, group: _Group, parts: frozenset[int]) -> asyncio.Task[None]:
        group.releasing |= parts
        self._apply_pauses()
        task = asyncio.create_task(self._release(group, parts), name=f"release-{group.topic}")
        self._releases.add(task)
        task.add_done_callback(self._releases.discard)
        return task

    async def _release(self, group: _Group, parts: frozenset[int]) -> None:
        if self._let_go is not None:
            dropped = self._let_go(group.topic, parts)
            if dropped:
                log.info(
                    "event=queued_handed_over group=%s partitions=%s records=%d",
                    group.group,
                    sorted(parts),
                    dropped,
                )
        try:
            await within(self._drain(group.topic, parts), self.options.drain_timeout_s)
        except TimeoutError:
            log.warning(
                "event=release_drain_timeout group=%s partitions=%s (the new owner repeats "
                "what was left unanswered)",
                group.group,
                sorted(parts),
            )
        try:
            await self._commit_now()
        except (KafkaError, TimeoutError) as exc:
            log.warning("event=release_commit_failed group=%s error=%r", group.group, exc)
        for partition in parts:
            self.offsets.forget(group.topic, partition)
        group.owned -= parts
        group.releasing -= parts
        log.info("event=partitions_released group=%s partitions=%s", group.group, sorted(parts))
        await self._publish_owned(group)

    async def _publish_owned(self, group: _Group) -> None:
        self.membership.owned[group.topic] = frozenset(group.owned)
        try:
            await self.membership.publish()
        except KafkaError as exc:  # the lease refresh carries it soon
            log.warning("event=owned_publish_failed error=%r", exc)

    # ---- commits -----------------------------------------------------------------------

    def request_commit(self) -> None:
        """Commit what is answered soon (commits coalesce under load)."""
        self._commit_wanted.set()

    async def _commit_loop(self) -> None:
        while True:
            await self._commit_wanted.wait()
            self._commit_wanted.clear()
            try:
                await self._commit_now()
            except (KafkaError, TimeoutError) as exc:
                # Uncommitted records are repeated by whoever reads them next: no loss.
                log.warning("event=commit_failed error=%r (retried)", exc)
                self._check_commits = True
                await asyncio.sleep(0.5)
                self._commit_wanted.set()
                continue
            await asyncio.sleep(self.options.commit_interval_s)

    async def _commit_now(self) -> None:
        if self.membership.lapsed_since(self._seen_lapses):
            # Not fenced yet: another instance may have taken these partitions and committed
            # past this one's offsets. Seen live: a worker frozen past its lease committed its
            # old offset (34) over the new owner's (100) when it went on, and 66 answered
            # requests were read and answered again. The fence forgets these offsets.
            return
        committable = self.offsets.committable()
        if not committable:
            return
        if self._check_commits and not await self._logs_kept():
            return
        done: dict[tuple[str, int], int] = {}
        for group in self._groups:
            if self.membership.lapsed_since(self._seen_lapses):
                break  # a lapse came while committing the groups before: the rest waits
            offsets = {
                partition: offset
                for (topic, partition), offset in committable.items()
                if topic == group.topic and partition in group.owned
            }
            if offsets:
                await within(group.committer.commit(offsets), self.options.commit_timeout_s)
                done.update({(group.topic, p): o for p, o in offsets.items()})
        self.offsets.mark_committed(done)
        self._check_commits = False

    async def _logs_kept(self) -> bool:
        """After a failed commit: may the offsets in hand be committed? A commit retried
        across a broker restart wrote the old log's offset to the fresh broker, and the
        partition's next reader skipped the new log up to it (seen live: a worker took a
        partition at 55 whose new log ended at 10 and never answered those 10 requests).

        False when the broker lost its logs (they are read again, which forgets these
        offsets); raises while that cannot be told yet, so the commit is retried. A
        consumer without control partitions cannot tell and commits (ingest's batch-tier
        consumer: its sibling with the control partitions finds the restart)."""
        lost = await within(self._logs_lost(), self.options.commit_timeout_s)
        if lost is None:
            raise KafkaConnectionError("not yet known whether the broker kept its logs")
        if lost:
            self.membership.logs_restarted(None)
            return False
        return True

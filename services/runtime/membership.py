"""This instance in the registry, and its view of the others, for partition ownership.

The instance publishes its record on every change and refreshes it within its lease;
it folds the registry and the scaler's decisions as its consumer reads them, and turns
them into each group's live members (`ownership.Member`). The rollout decisions come on
the same consumer and are kept in `rollouts` for ingest's split and the workers' versions.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson
from aiokafka.errors import KafkaError
from pydantic import ValidationError

from infra.registry import RegistryTable, decode, fold, is_live, tombstone
from infra.rollout.state import RolloutBook
from infra.tasks import cancel_and_wait
from infra.topics import BROKER_EVENT_KEY, recreated_topics
from schemas.telemetry import InstanceRecord, InstanceState
from schemas.topics import DECISIONS, INSTANCES, ROLLOUTS, Tier
from services.runtime.ownership import Member

log = logging.getLogger(__name__)

Send = Callable[[str, bytes, bytes], Awaitable[Any]]
"""(topic, key, value) -> produced and acked."""


FENCE_AT_LEASE_FRACTION = 0.75
"""An instance stops reading when its last record is this far into its lease: ahead of
the others counting it gone (their clocks and reads lag a little)."""


def _utcnow() -> datetime:
    return datetime.now(UTC)


def default_instance_id(prefix: str) -> str:
    """`<prefix>-<host>-<pid>-<random>`: unique even for two instances in one process
    (ownership tells members apart by it)."""
    return f"{prefix}-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


@dataclass
class Identity:
    """What does not change over an instance's life."""

    instance_id: str
    service: str
    model: str
    tiers: list[Tier]
    groups: list[str]
    started_at: datetime
    host: str = field(default_factory=socket.gethostname)
    pid: int = field(default_factory=os.getpid)


@dataclass(frozen=True)
class Consuming:
    """The scaler's word on a group: how many of its members consume (the rest stand by)."""

    desired: int
    at: float


def gone_record(
    instance_id: str, *, model: str, tiers: list[Tier], group: str, service: str
) -> InstanceRecord:
    """The last word for an instance whose process died: a supervisor says it at once, so
    its partitions move now instead of when its lease runs out."""
    now = _utcnow()
    return InstanceRecord(
        instance_id=instance_id,
        service=service,
        model=model,
        tiers=tiers,
        group=group,
        groups=[group],
        state="gone",
        started_at=now,
        updated_at=now,
    )


class Membership:
    """Publishes this instance's record and keeps the registry and decisions it has read."""

    def __init__(
        self,
        send: Send,
        identity: Identity,
        *,
        lease_s: float = 3.0,
        details: Callable[[], Mapping[str, Any]] | None = None,
        clock: Callable[[], datetime] = _utcnow,
    ) -> None:
        self.identity = identity
        self.lease_s = lease_s
        self.state: InstanceState = "loading"
        self.owned: dict[str, frozenset[int]] = {}
        self.ready_at: datetime | None = None
        self.table = RegistryTable()
        self.consuming: dict[str, Consuming] = {}
        self.rollouts = RolloutBook()
        """The rollout decision in force per model, as read from `inferbus.rollouts`."""
        self._send = send
        self._details = details
        self._clock = clock
        self._refresh: asyncio.Task[None] | None = None
        self._publish_lock = asyncio.Lock()
        self.version = 0
        """Bumped whenever the view of other members or decisions changes."""
        self.published_at: datetime | None = None
        """When the last record that reached the broker was made (others time the lease
        from it)."""
        self.lapses = 0
        """Times this instance's lease lapsed, counted when its next record went out (a
        pause, a starved process, a slow or absent broker): each reader of its partitions
        fences once per lapse, even after that record made the lease fresh again
        (`lapsed_since`)."""
        self._pause: tuple[datetime, datetime] | None = None
        """The last lapse: (its record before, when it was counted)."""
        self._lapse_noticed = False
        """`lease_lapsed()` said so since the last record went out: the next one counts it."""
        self._broker_notes: set[bytes] = set()
        self._restarted: list[frozenset[str] | None] = []
        """Each time logs started over, the topics whose logs did (None: every topic)."""

    @property
    def broker_restarts(self) -> int:
        """How many times logs started over (a note heard, or a consumer's own finding)."""
        return len(self._restarted)

    def logs_restarted(self, topics: frozenset[str] | None) -> None:
        """The logs of `topics` (None: of every topic) started over: the broker lost them,
        or they were made for the first time. Consumers read those partitions again."""
        self._restarted.append(topics)

    def restarted_since(self, seen: int) -> frozenset[str] | None:
        """The topics whose logs started over after the first `seen` restarts (None: all)."""
        topics: set[str] = set()
        for named in self._restarted[seen:]:
            if named is None:
                return None
            topics |= named
        return frozenset(topics)

    # ---- this instance -----------------------------------------------------------------

    def record(self) -> InstanceRecord:
        """This instance's registry record as of now."""
        identity = self.identity
        owned = {topic: sorted(parts) for topic, parts in self.owned.items() if parts}
        return InstanceRecord(
            instance_id=identity.instance_id,
            service=identity.service,
            model=identity.model,
            tiers=identity.tiers,
            group=identity.groups[0],
            groups=identity.groups,
            state=self.state,
            host=identity.host,
            pid=identity.pid,
            started_at=identity.started_at,
            updated_at=self._clock(),
            ready_at=self.ready_at,
            lease_s=self.lease_s,
            owned=owned,
            partitions=sum(len(parts) for parts in self.owned.values()),
            **dict(self._details() if self._details else {}),
        )

    async def publish(self, state: InstanceState | None = None) -> None:
        """Publish the record (with a new state): on every change, and within the lease."""
        async with self._publish_lock:
            serving = self.ready_at is not None  # a model's load is no lapse: nothing is held
            if state is not None:
                self.state = state
                if state == "ready" and self.ready_at is None:
                    self.ready_at = self._clock()
            record = self.record()
            previous = self.published_at
            self.lease_lapsed()  # a lapse under way now is noticed, whatever the send takes
            await self._send(
                INSTANCES, self.identity.instance_id.encode(), record.model_dump_json().encode()
            )
            # Counted once the record is out: a lapse seen since the last record, or one
            # that began while this send waited on a slow broker or a stalled loop (a lapse
            # that ended unseen inside a send left the readers unfenced).
            if serving and previous is not None and (self._lapse_noticed or self._aged(previous)):
                self.lapses += 1
                self._pause = (previous, self._clock())
            self._lapse_noticed = False
            self.published_at = record.updated_at
            self.table = fold(self.table, record)

    async def announce_leaving(self, state: InstanceState) -> None:
        """Publish `draining` or `gone` on the way out, as far as the broker hears it: one
        that is away cannot, and the lease then says the instance is gone (logged)."""
        try:
            await self.publish(state)
        except KafkaError as exc:
            log.warning("event=registry_publish_failed state=%s error=%r", state, exc)

    def lease_lapsed(self) -> bool:
        """Whether the others may count this instance gone by now: its last record that
        reached the broker is older than most of its lease (a starved process, a broker it
        cannot reach). Its partitions may have moved: it must not read them until a fresh
        record is out."""
        if self.published_at is None or not self._aged(self.published_at):
            return False
        self._lapse_noticed = True  # counted by the next publish, even if it ends in time
        return True

    def _aged(self, published_at: datetime) -> bool:
        """A record made at `published_at` is past the point where this instance fences."""
        age = (self._clock() - published_at).total_seconds()
        return age > self.lease_s * FENCE_AT_LEASE_FRACTION

    def lapsed_since(self, seen: int) -> bool:
        """The lease lapsed now, or did after the first `seen` lapses: a refresh that ran
        first after a pause (a frozen process goes on) made the record fresh before the
        readers looked, and they read on from where they were, partitions another
        instance had taken meanwhile (seen live: 400 answers repeated after a 20 s SIGSTOP)."""
        return self.lease_lapsed() or self.lapses > seen

    def _judged_at(self) -> datetime:
        """When others' records are judged live: now, less the last pause for one lease
        after it was noticed. Paused, this instance read none of their refreshes: judged
        at once, every other member looked gone and it took their partitions."""
        now = self._clock()
        if self._pause is None:
            return now
        before, noticed = self._pause
        if (now - noticed).total_seconds() >= self.lease_s:
            return now
        return now - (noticed - before)

    def start_refresh(self) -> None:
        """Refresh the record every third of the lease until `stop_refresh` (idempotent)."""
        if self._refresh is None:
            self._refresh = asyncio.create_task(self._refresh_loop(), name="registry-refresh")

    async def stop_refresh(self) -> None:
        task, self._refresh = self._refresh, None
        await cancel_and_wait(task)

    async def _refresh_loop(self) -> None:
        while True:
            await asyncio.sleep(self.lease_s / 3)
            try:
                await self.publish()
            except Exception as exc:  # the next refresh retries; past the lease we count gone
                log.warning("event=registry_refresh_failed error=%r", exc)

    # ---- the others --------------------------------------------------------------------

    def observe(self, topic: str, key: bytes | None, value: bytes | None) -> None:
        """Fold one record read from the registry, the decisions or the rollouts topic."""
        if topic == INSTANCES:
            self._observe_instance(key, value)
        elif topic == DECISIONS and value is not None:
            self._observe_decision(value)
        elif topic == ROLLOUTS:
            self.rollouts.observe(key, value)

    def _observe_instance(self, key: bytes | None, value: bytes | None) -> None:
        if key == BROKER_EVENT_KEY:
            # Topics were re-created after the broker lost its logs: read all from the start,
            # once per note (reading from the start reads the note again).
            if value is not None and value not in self._broker_notes:
                self._broker_notes.add(value)
                topics = recreated_topics(value)
                log.warning(
                    "event=topics_recreated_heard instance=%s topics=%s",
                    self.identity.instance_id,
                    "all" if topics is None else ",".join(sorted(topics)),
                )
                self.logs_restarted(topics)
            return
        try:
            record = decode(value)
        except ValidationError as exc:
            log.warning("event=registry_record_invalid key=%r errors=%d", key, exc.error_count())
            return
        if record is None:
            if key is not None:
                self.table = tombstone(self.table, key.decode(errors="replace"))
                self.version += 1
            return
        if record.instance_id == self.identity.instance_id:
            return  # our own echo; our local state is newer
        self.table = fold(self.table, record)
        self.version += 1

    def _observe_decision(self, value: bytes) -> None:
        try:
            raw = orjson.loads(value)
        except orjson.JSONDecodeError:
            log.warning("event=decision_record_invalid")
            return
        if not isinstance(raw, dict) or raw.get("group") not in self.identity.groups:
            return
        # Only a scaler that keeps warm standbys says how many consume; others leave every
        # serving member consuming.
        desired, standby, at = raw.get("desired"), raw.get("standby"), raw.get("at")
        if not (isinstance(desired, int) and isinstance(standby, int)):
            self.consuming.pop(str(raw["group"]), None)
        elif raw.get("acting", raw.get("applied", True)) and isinstance(at, int | float):
            self.consuming[str(raw["group"])] = Consuming(desired, float(at))
        self.version += 1

    def members(self, group: str, topic: str) -> list[Member]:
        """The live members of `group` (this one from its own state), for `topic`'s partitions."""
        now = self._judged_at()
        out = [self._me(topic)]
        for record in self.table.instances.values():
            if record.instance_id == self.identity.instance_id:
                continue
            if group not in record.groups and record.group != group:
                continue
            if not is_live(record, now):
                continue
            out.append(
                Member(
                    instance_id=record.instance_id,
                    ready_at=(record.ready_at or record.updated_at).timestamp(),
                    serving=record.state == "ready",
                    owned=frozenset(record.owned.get(topic, ())),
                )
            )
        return out

    def _me(self, topic: str) -> Member:
        return Member(
            instance_id=self.identity.instance_id,
            ready_at=(self.ready_at or self._clock()).timestamp(),
            serving=self.state == "ready",
            owned=self.owned.get(topic, frozenset()),
        )

    def desired(self, group: str, *, max_age_s: float = 300.0) -> int | None:
        """How many members of `group` consume by the scaler's latest word; None: all."""
        word = self.consuming.get(group)
        if word is None or self._clock().timestamp() - word.at > max_age_s:
            return None
        return word.desired

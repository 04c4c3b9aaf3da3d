"""What an instance sees of its group: live members by lease, their claims, the scaler's word."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aiokafka.errors import KafkaConnectionError

from schemas.telemetry import InstanceRecord
from schemas.topics import DECISIONS, INSTANCES
from services.runtime.membership import Identity, Membership

GROUP = "inferbus.workers.demo-mlp.interactive"
TOPIC = "inferbus.req.demo-mlp.interactive"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def membership(clock: Clock, sent: list[tuple[str, bytes, bytes]]) -> Membership:
    async def send(topic: str, key: bytes, value: bytes) -> None:
        sent.append((topic, key, value))

    identity = Identity("me", "inferbus-worker", "demo-mlp", ["interactive"], [GROUP], T0)
    return Membership(send, identity, lease_s=3.0, clock=clock)


def record(
    instance: str, *, at: datetime, state: str = "ready", owned: list[int] | None = None
) -> bytes:
    return (
        InstanceRecord(
            instance_id=instance,
            model="demo-mlp",
            tiers=["interactive"],
            group=GROUP,
            groups=[GROUP],
            state=state,  # type: ignore[arg-type]
            started_at=T0,
            updated_at=at,
            ready_at=T0,
            lease_s=3.0,
            owned={TOPIC: owned or []},
        )
        .model_dump_json()
        .encode()
    )


def names(m: Membership) -> list[str]:
    return sorted(member.instance_id for member in m.members(GROUP, TOPIC))


async def test_own_record_carries_state_owned_partitions_and_lease() -> None:
    clock, sent = Clock(), []
    m = membership(clock, sent)
    m.owned[TOPIC] = frozenset({3, 1})
    await m.publish("ready")
    [(topic, key, value)] = sent
    published: dict[str, Any] = json.loads(value)
    assert (topic, key) == (INSTANCES, b"me")
    assert published["state"] == "ready" and published["lease_s"] == 3.0
    assert published["owned"] == {TOPIC: [1, 3]} and published["partitions"] == 2
    assert published["ready_at"] is not None


def test_others_count_while_their_lease_holds() -> None:
    clock, sent = Clock(), []
    m = membership(clock, sent)
    m.observe(INSTANCES, b"a", record("a", at=T0, owned=[4, 5]))
    m.observe(INSTANCES, b"b", record("b", at=T0 - timedelta(seconds=10)))
    assert names(m) == ["a", "me"], "b's lease ran out before we read it"
    claims = {member.instance_id: member.owned for member in m.members(GROUP, TOPIC)}
    assert claims["a"] == {4, 5}
    clock.now = T0 + timedelta(seconds=3.5)
    assert names(m) == ["me"], "a died without a word: gone once its lease runs out"


def test_gone_and_tombstones_remove_at_once() -> None:
    clock, sent = Clock(), []
    m = membership(clock, sent)
    m.observe(INSTANCES, b"a", record("a", at=T0))
    m.observe(INSTANCES, b"b", record("b", at=T0))
    m.observe(INSTANCES, b"a", record("a", at=T0 + timedelta(seconds=1), state="gone"))
    m.observe(INSTANCES, b"b", None)
    assert names(m) == ["me"]


def test_draining_members_keep_their_claims_but_take_no_new_work() -> None:
    clock, sent = Clock(), []
    m = membership(clock, sent)
    m.observe(INSTANCES, b"a", record("a", at=T0, state="draining", owned=[7]))
    [other] = [x for x in m.members(GROUP, TOPIC) if x.instance_id == "a"]
    assert not other.serving and other.owned == {7}


def test_an_invalid_registry_record_is_skipped() -> None:
    clock, sent = Clock(), []
    m = membership(clock, sent)
    m.observe(INSTANCES, b"x", b"{not json")
    assert names(m) == ["me"]


def decision(**fields: Any) -> bytes:
    return json.dumps({"group": GROUP, "applied": True, "at": T0.timestamp(), **fields}).encode()


def test_the_scaler_word_on_how_many_consume() -> None:
    clock, sent = Clock(), []
    m = membership(clock, sent)
    version = m.version
    m.observe(DECISIONS, GROUP.encode(), decision(desired=2))
    assert m.desired(GROUP) is None, "a scaler that keeps no standby leaves all consuming"
    m.observe(DECISIONS, GROUP.encode(), decision(desired=2, standby=1))
    assert m.desired(GROUP) == 2
    assert m.version > version
    m.observe(DECISIONS, b"other", decision(group="other", desired=0, standby=0))
    assert m.desired(GROUP) == 2
    clock.now = T0 + timedelta(minutes=10)
    assert m.desired(GROUP) is None, "an old word lapses: everyone consumes again"


def test_a_dry_run_scalers_word_is_not_followed() -> None:
    clock, sent = Clock(), []
    m = membership(clock, sent)
    m.observe(DECISIONS, GROUP.encode(), decision(desired=1, standby=2, acting=False))
    assert m.desired(GROUP) is None
    m.observe(DECISIONS, GROUP.encode(), decision(desired=1, standby=2, applied=False, acting=True))
    assert m.desired(GROUP) == 1, "a hold of an acting scaler still says how many consume"


async def test_the_lease_lapses_ahead_of_the_others_counting_it_gone() -> None:
    clock, sent = Clock(), []
    m = membership(clock, sent)
    assert not m.lease_lapsed()  # nothing published: nothing to fence
    await m.publish("ready")
    for seconds, lapsed in [(0.0, False), (2.0, False), (2.3, True), (3.0, True)]:
        clock.now = T0 + timedelta(seconds=seconds)
        assert m.lease_lapsed() is lapsed, seconds
    await m.publish()  # a fresh record renews it
    assert not m.lease_lapsed()


async def test_a_lapse_a_refresh_ended_is_still_seen_by_every_reader() -> None:
    """Regression: after a 20 s SIGSTOP the refresh loop ran first and made the record fresh;
    the readers never saw the lapse and read on from where they were, in partitions another
    worker had taken meanwhile (400 repeated answers)."""
    clock, sent = Clock(), []
    m = membership(clock, sent)
    await m.publish("ready")
    assert (m.lapses, m.lapsed_since(0)) == (0, False)
    clock.now = T0 + timedelta(seconds=20)  # frozen, then the refresh runs first
    await m.publish()
    assert not m.lease_lapsed()
    assert m.lapses == 1
    assert m.lapsed_since(0) and not m.lapsed_since(1)
    clock.now = T0 + timedelta(seconds=21)
    await m.publish()  # a routine refresh is no lapse
    assert m.lapses == 1


async def test_a_lapse_that_ends_inside_a_slow_send_is_counted() -> None:
    """Regression (review): a send that began in time and ended after the fence point made
    the lease fresh with no lapse counted, though the worker's queue had been let go during
    it: no reader fenced, the records let go were never read again, commits stopped there."""
    clock = Clock()

    async def slow(topic: str, key: bytes, value: bytes) -> None:
        clock.now += timedelta(seconds=1.5)  # a slow broker

    identity = Identity("me", "inferbus-worker", "demo-mlp", ["interactive"], [GROUP], T0)
    m = Membership(slow, identity, lease_s=3.0, clock=clock)
    await m.publish("ready")
    clock.now = T0 + timedelta(seconds=1.0)  # 1.0 s old when the refresh starts: in time
    await m.publish()  # ... 2.5 s old when it is out: past the fence point (2.25 s)
    assert m.lapses == 1 and m.lapsed_since(0)


async def test_a_lapse_seen_by_a_reader_is_counted_by_the_next_record() -> None:
    clock, sent = Clock(), []
    m = membership(clock, sent)
    await m.publish("ready")
    clock.now = T0 + timedelta(seconds=2.4)
    assert m.lease_lapsed()  # the pipeline looks, and lets its queue go
    clock.now = T0 + timedelta(seconds=2.0)  # the clock steps back before the refresh
    await m.publish()
    assert m.lapses == 1


async def test_a_models_load_is_no_lapse() -> None:
    clock, sent = Clock(), []
    m = membership(clock, sent)
    await m.publish("loading")
    clock.now = T0 + timedelta(seconds=30)  # a long load: nothing held, nothing to fence
    await m.publish("ready")
    assert m.lapses == 0


@pytest.mark.parametrize(
    ("after_s", "other_at_s", "live"),
    [
        pytest.param(0.5, 0.0, True, id="just-back:-its-last-record-from-before-the-pause"),
        pytest.param(2.9, 0.0, True, id="within-one-lease-of-coming-back"),
        pytest.param(3.1, 0.0, False, id="a-lease-after:-no-fresh-record-means-gone"),
        pytest.param(3.1, 20.5, True, id="a-lease-after:-its-fresh-record"),
    ],
)
async def test_paused_others_are_judged_as_of_the_pause_for_one_lease(
    after_s: float, other_at_s: float, live: bool
) -> None:
    """Regression: back from a pause, every other member's record looked a pause old, so
    they all looked gone and the instance took their partitions at once."""
    clock, sent = Clock(), []
    m = membership(clock, sent)
    await m.publish("ready")
    m.observe(INSTANCES, b"other", record("other", at=T0 + timedelta(seconds=other_at_s)))
    clock.now = T0 + timedelta(seconds=20)
    await m.publish()  # the pause is noticed here
    clock.now = T0 + timedelta(seconds=20 + after_s)
    assert ("other" in names(m)) is live


async def test_a_failed_publish_does_not_renew_the_lease() -> None:
    clock = Clock()

    async def unreachable(topic: str, key: bytes, value: bytes) -> None:
        raise ConnectionError("broker unreachable")

    identity = Identity("me", "inferbus-worker", "demo-mlp", ["interactive"], [GROUP], T0)
    m = Membership(unreachable, identity, lease_s=3.0, clock=clock)
    m.published_at = T0
    clock.now = T0 + timedelta(seconds=2.5)
    with pytest.raises(ConnectionError):
        await m.publish()
    assert m.lease_lapsed()


async def test_leaving_said_to_a_broker_that_is_away_is_logged_not_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def away(topic: str, key: bytes, value: bytes) -> None:
        raise KafkaConnectionError("broker away")

    identity = Identity("me", "inferbus-worker", "demo-mlp", ["interactive"], [GROUP], T0)
    m = Membership(away, identity, lease_s=3.0, clock=Clock())

    await m.announce_leaving("gone")

    assert m.state == "gone"
    assert "event=registry_publish_failed state=gone" in caplog.text


# ---- logs that started over --------------------------------------------------------------


NEW = "inferbus.req.new-model.interactive"
NEW_BATCH = "inferbus.req.new-model.batch"


def note(topics: list[str] | None, at: float = 1.0) -> bytes:
    body: dict[str, Any] = {"event": "topics_recreated", "at": at}
    if topics is not None:
        body["topics"] = topics
    return json.dumps(body).encode()


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (note([NEW, NEW_BATCH]), frozenset({NEW, NEW_BATCH})),
        (note([NEW, "inferbus.ingest"]), None),
        (note([]), frozenset()),
        (note(None), None),
        (b'{"event": "broker_back"}', None),
        (b"not json", None),
        (b'{"topics": "a"}', None),
        (b'{"topics": [1, 2]}', None),
        (b"[]", None),
    ],
    ids=[
        "tier-topics",
        "a-core-topic-too",
        "none-named",
        "no-list",
        "broker-back",
        "garbage",
        "not-a-list",
        "not-str",
        "array",
    ],
)
def test_a_note_names_the_topics_that_started_over_or_means_all(
    value: bytes, expected: frozenset[str] | None
) -> None:
    from infra.topics import recreated_topics

    assert recreated_topics(value) == expected


def test_restarts_are_counted_once_per_note_and_name_their_topics() -> None:
    from infra.topics import BROKER_EVENT_KEY

    m = membership(Clock(), [])
    m.observe(INSTANCES, BROKER_EVENT_KEY, note([NEW]))
    m.observe(INSTANCES, BROKER_EVENT_KEY, note([NEW]))
    assert m.broker_restarts == 1, "the same note read again (from the start) counts once"
    assert m.restarted_since(0) == {NEW}
    m.observe(INSTANCES, BROKER_EVENT_KEY, note([NEW_BATCH], at=2.0))
    assert m.restarted_since(0) == {NEW, NEW_BATCH}
    assert m.restarted_since(1) == {NEW_BATCH}
    m.logs_restarted(None)  # a consumer found a log that went back: every log
    assert m.restarted_since(1) is None
    assert m.restarted_since(3) == frozenset()

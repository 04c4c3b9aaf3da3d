"""Ingest's catalog: queue depth arithmetic from acks and committed offsets, cached configs."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from aiokafka import TopicPartition

from infra.models.config import ModelConfig, ModelConfigError
from infra.models.repository import ModelRepository
from schemas.errors import ModelNotFound
from services.ingest import catalog as catalog_module
from services.ingest.app import metric_model
from services.ingest.catalog import (
    CachedModelCatalog,
    CommitSpan,
    QueueDepths,
    admission_rate,
    backlogged,
    drain_capacity,
    projected_depth,
    span_rate,
)
from services.models.demo import mlp_config, write_demo_models

T = "inferbus.req.demo-mlp.interactive"
OTHER = "inferbus.req.demo-mlp.batch"


def tp(partition: int, topic: str = T) -> TopicPartition:
    return TopicPartition(topic, partition)


def depths(
    *,
    acks: list[tuple[str, int, int]] = (),  # type: ignore[assignment]
    committed: dict[TopicPartition, int] | None = None,
    listed: dict[TopicPartition, int] | None = None,
) -> QueueDepths:
    queue = QueueDepths("unused:9092", refresh_ms=500)
    for topic, partition, offset in acks:
        queue.observe_ack(topic, partition, offset)
    queue._committed.update(committed or {})
    queue._listed_end.update(listed or {})
    for tp_ in committed or {}:
        queue._partitions[tp_.topic].add(tp_)
    # As a refresh leaves it: ends as of the read, read just now.
    for tp_ in committed or {}:
        queue._end_at_read[tp_] = queue._acked_end.get(tp_, 0)
        queue._read_at[tp_.topic] = time.monotonic()
    return queue


@pytest.mark.parametrize(
    ("queue", "expected"),
    [
        pytest.param(depths(), None, id="never-seen"),
        # Before the first refresh only what this ingest routed counts, never all history.
        pytest.param(depths(acks=[(T, 0, 1_000_000)]), 1, id="acked-before-first-refresh"),
        pytest.param(
            depths(acks=[(T, 0, 1_000_000), (T, 0, 1_000_002)]), 3, id="routed-since-start"
        ),
        pytest.param(depths(committed={tp(0): 0}), 0, id="committed-no-end"),
        pytest.param(depths(acks=[(T, 0, 9)], committed={tp(0): 0}), 10, id="no-commit-yet"),
        pytest.param(depths(acks=[(T, 0, 9)], committed={tp(0): 4}), 6, id="ack-minus-committed"),
        pytest.param(depths(acks=[(T, 0, 9)], committed={tp(0): 10}), 0, id="all-consumed"),
        pytest.param(depths(acks=[(T, 0, 9)], committed={tp(0): 50}), 0, id="committed-past-ack"),
        pytest.param(
            depths(acks=[(T, 0, 9)], committed={tp(0): 4}, listed={tp(0): 30}),
            26,
            id="listed-end-ahead-of-acks",
        ),
        pytest.param(
            depths(acks=[(T, 0, 39)], committed={tp(0): 4}, listed={tp(0): 30}),
            36,
            id="acks-ahead-of-listed-end",
        ),
        pytest.param(
            depths(committed={tp(0): 3, tp(1): 5}, listed={tp(0): 10, tp(1): 5}),
            7,
            id="listed-only",
        ),
        pytest.param(
            depths(
                acks=[(T, 0, 9), (T, 1, 19), (T, 2, 4)], committed={tp(0): 5, tp(1): 5, tp(2): 5}
            ),
            5 + 15 + 0,
            id="partitions-sum",
        ),
        pytest.param(
            depths(acks=[(T, 0, 9), (T, 1, 1_000)], committed={tp(0): 5}),
            5 + 1,
            id="unrefreshed-partition-counts-own-routes",
        ),
        pytest.param(
            depths(
                acks=[(T, 0, 9), (OTHER, 0, 999)],
                committed={tp(0): 0, tp(0, OTHER): 0},
            ),
            10,
            id="other-topics-ignored",
        ),
        pytest.param(
            depths(acks=[(T, 0, 9), (T, 0, 3), (T, 0, 7)], committed={tp(0): 0}),
            10,
            id="acks-out-of-order-keep-max",
        ),
    ],
)
def test_depth(queue: QueueDepths, expected: int | None) -> None:
    for topic in queue._read_at:  # built at collection, read "just now" as of the test
        queue._read_at[topic] = time.monotonic()
    assert queue.depth(T) == expected


def test_reserved_routes_count_until_acked_or_released() -> None:
    queue = depths(committed={tp(0): 0})
    queue.reserve(T)
    queue.reserve(T)
    assert queue.depth(T) == 2, "a poll's routes count before their acks"
    queue.observe_ack(T, 0, 0)
    assert queue.depth(T) == 2, "one acked (end 1) plus one still in flight"
    queue.release(T)
    assert queue.depth(T) == 1


def test_depth_watches_the_topics_it_is_asked_about() -> None:
    queue = depths()

    queue.depth("inferbus.req.other.batch")

    assert "inferbus.req.other.batch" in queue._topics


def test_watch_models_tracks_every_tier_topic() -> None:
    queue = depths()

    queue.watch_models(["demo-mlp", "demo-encoder"])

    assert queue._topics == {
        f"inferbus.req.{model}.{tier}"
        for model in ("demo-mlp", "demo-encoder")
        for tier in ("critical", "interactive", "batch")
    }


def test_observe_ack_keeps_the_highest_end() -> None:
    queue = depths()

    for offset in (5, 2, 8, 8, 0):
        queue.observe_ack(T, 3, offset)

    assert queue._acked_end == {tp(3): 9}


# ---- CachedModelCatalog ---------------------------------------------------------------------


class CountingRepository:
    """A repository whose answers can be changed, counting reads."""

    def __init__(self) -> None:
        self.result: ModelConfig | Exception = mlp_config()
        self.version_list = ["1"]
        self.config_reads = 0
        self.version_reads = 0

    def config(self, name: str) -> ModelConfig:
        self.config_reads += 1
        if isinstance(self.result, Exception):
            raise self.result
        return self.result

    def versions(self, name: str) -> list[str]:
        self.version_reads += 1
        return self.version_list


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(catalog_module.time, "monotonic", fake)
    return fake


def make_catalog(
    repository: CountingRepository, queue: QueueDepths | None = None
) -> CachedModelCatalog:
    return CachedModelCatalog(
        repository,  # type: ignore[arg-type]
        refresh_s=5.0,
        depths=queue or depths(),
    )


def test_config_is_read_at_most_once_per_refresh(clock: Clock) -> None:
    repository = CountingRepository()
    catalog = make_catalog(repository)

    for step in (0.0, 1.0, 5.0):
        clock.now = 100.0 + step
        assert catalog.config("demo-mlp").name == "demo-mlp"
    assert repository.config_reads == 1

    clock.now = 105.5
    catalog.config("demo-mlp")
    assert repository.config_reads == 2


def test_config_errors_are_cached_and_raised_every_time(clock: Clock) -> None:
    repository = CountingRepository()
    repository.result = ModelNotFound("model 'x' is not in the repository", model="x")
    catalog = make_catalog(repository)

    for _ in range(3):
        with pytest.raises(ModelNotFound):
            catalog.config("x")
    assert repository.config_reads == 1

    repository.result = mlp_config()
    clock.now += 6
    assert catalog.config("x").name == "demo-mlp"


def test_names_that_do_not_resolve_are_remembered_only_so_many(clock: Clock) -> None:
    repository = CountingRepository()
    repository.result = ModelNotFound("no such model", model="x")
    catalog = make_catalog(repository)

    for i in range(catalog_module.MISSES_KEPT + 50):
        with pytest.raises(ModelNotFound):
            catalog.config(f"made-up-{i}")

    assert len(catalog._misses) == catalog_module.MISSES_KEPT
    assert "made-up-0" not in catalog._misses  # the oldest went first
    assert not catalog.knows("made-up-60")
    repository.result = mlp_config()
    catalog.config("demo-mlp")
    assert catalog.knows("demo-mlp")


def test_a_remembered_error_does_not_grow_with_each_raise(clock: Clock) -> None:
    repository = CountingRepository()
    repository.result = ModelNotFound("no such model", model="x")
    catalog = make_catalog(repository)
    depths = []
    for _ in range(5):
        with pytest.raises(ModelNotFound) as raised:
            catalog.config("x")
        tb, frames = raised.value.__traceback__, 0
        while tb is not None:
            frames, tb = frames + 1, tb.tb_next
        depths.append(frames)
    assert depths[-1] == depths[1]


def test_config_picks_up_a_fix_after_refresh(clock: Clock) -> None:
    repository = CountingRepository()
    repository.result = ModelConfigError("models/x/model.yaml: inputs: Field required")
    catalog = make_catalog(repository)
    with pytest.raises(ModelConfigError, match="inputs"):
        catalog.config("x")

    repository.result = mlp_config()
    clock.now += 5.1

    assert catalog.config("x") is repository.result


def test_a_live_config_gone_bad_keeps_the_last_good_one_until_fixed(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    """A typo in a live model.yaml failed every request for 15 s while the workers served."""
    repository = CountingRepository()
    good = repository.result
    catalog = make_catalog(repository)
    assert catalog.config("demo-mlp") is not None

    repository.result = ModelConfigError("models/demo-mlp/model.yaml: rollout.share: <= 1")
    for step in (5.1, 10.2, 15.3):
        clock.now = 100.0 + step
        assert catalog.config("demo-mlp").name == "demo-mlp"
    warnings = [r for r in caplog.records if "model_config_unreadable" in r.getMessage()]
    assert len(warnings) == 1, "said once while the problem stays the same"
    assert "rollout.share" in warnings[0].getMessage()

    repository.result = good
    clock.now += 5.1
    assert catalog.config("demo-mlp") is good
    assert not catalog._problems


def test_a_model_whose_folder_is_gone_is_not_kept(clock: Clock) -> None:
    repository = CountingRepository()
    catalog = make_catalog(repository)
    catalog.config("demo-mlp")
    repository.result = ModelNotFound("model 'demo-mlp' is not in the repository", model="x")
    clock.now += 5.1
    with pytest.raises(ModelNotFound):
        catalog.config("demo-mlp")


def test_versions_are_cached_per_refresh(clock: Clock) -> None:
    repository = CountingRepository()
    catalog = make_catalog(repository)

    assert catalog.has_version("demo-mlp", "1")
    assert not catalog.has_version("demo-mlp", "2")
    repository.version_list = ["1", "2"]
    assert not catalog.has_version("demo-mlp", "2")
    clock.now += 6
    assert catalog.has_version("demo-mlp", "2")
    assert repository.version_reads == 2


def test_queue_depth_comes_from_the_depths() -> None:
    queue = depths(acks=[(T, 0, 9)], committed={tp(0): 2})
    catalog = make_catalog(CountingRepository(), queue)

    assert catalog.queue_depth(T) == 8
    assert catalog.queue_depth(OTHER) is None


# ---- the repository behind it ---------------------------------------------------------------


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> ModelRepository:
    root = tmp_path_factory.mktemp("models")
    write_demo_models(root)
    return ModelRepository(root)


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("missing", id="absent"),
        pytest.param("demo-mlp/", id="trailing-slash"),
        pytest.param("./demo-mlp", id="dot-slash"),
        pytest.param("../models0/demo-mlp", id="parent"),
        pytest.param("demo-mlp/.", id="slash-dot"),
        pytest.param("DEMO-MLP", id="upper-case"),
        pytest.param("", id="empty"),
    ],
)
def test_repository_refuses_names_that_are_not_model_folders(
    repo: ModelRepository, name: str
) -> None:
    with pytest.raises(ModelNotFound):
        repo.config(name)
    assert repo.versions(name) == []
    with pytest.raises(ModelNotFound):
        repo.resolve(name)


def test_repository_lists_and_resolves_demo_models(repo: ModelRepository) -> None:
    assert repo.names() == ["demo-encoder", "demo-mlp"]
    assert repo.versions("demo-mlp") == ["1"]
    version = repo.resolve("demo-mlp")
    assert (version.name, version.version) == ("demo-mlp", "1")
    assert version.model_file.is_file()
    assert version.config == mlp_config()


@pytest.mark.parametrize(
    ("folders", "expected"),
    [
        pytest.param({"1": b"x", "2": b"x", "10": b"x"}, ["1", "2", "10"], id="numeric-order"),
        pytest.param({"1": b"x", "2": b""}, ["1"], id="empty-file-is-half-written"),
        pytest.param({"1": b"x", "2": None}, ["1"], id="no-model-file"),
        pytest.param({"1": b"x", ".3": b"x"}, ["1"], id="hidden-folder"),
        pytest.param({"1": b"x", "v2": b"x"}, ["1", "v2"], id="names-after-numbers"),
    ],
)
def test_repository_versions(
    tmp_path: Path, folders: dict[str, bytes | None], expected: list[str]
) -> None:
    base = tmp_path / "demo-mlp"
    base.mkdir()
    mlp_config().dump(base / "model.yaml")
    for folder, content in folders.items():
        (base / folder).mkdir()
        if content is not None:
            (base / folder / "model.onnx").write_bytes(content)

    assert ModelRepository(tmp_path).versions("demo-mlp") == expected


def test_ready_marker_makes_a_version_complete(tmp_path: Path) -> None:
    (tmp_path / "demo-mlp" / "1").mkdir(parents=True)
    mlp_config().dump(tmp_path / "demo-mlp" / "model.yaml")
    (tmp_path / "demo-mlp" / "1" / "model.onnx").write_bytes(b"onnx")
    (tmp_path / "demo-mlp" / "2").mkdir()
    (tmp_path / "demo-mlp" / "2" / "READY").touch()

    repository = ModelRepository(tmp_path)

    assert repository.versions("demo-mlp") == ["1", "2"]
    with pytest.raises(ModelNotFound, match="no version '3'"):
        repository.resolve("demo-mlp", "3")


@pytest.mark.parametrize(
    ("depth", "previous", "was", "rate", "expected"),
    [
        (10, 5, False, None, True),  # growing: a backlog
        (5, 5, False, 40.0, False),  # steady and never backlogged: keeping up
        (900, 900, True, 40.0, True),  # held steady by admission: still a backlog
        (600, 900, True, 40.0, True),  # draining, not drained
        (20, 900, True, 40.0, False),  # down to what one refresh commits (40/s x 0.5 s)
        (0, 3, True, None, False),  # drained, rate unknown
    ],
)
def test_backlogged(
    depth: int, previous: int, was: bool, rate: float | None, expected: bool
) -> None:
    assert backlogged(depth, previous=previous, was=was, rate=rate, interval_s=0.5) is expected


@pytest.mark.parametrize(
    ("known", "interval_rate", "within_backlog", "rate_before", "expected"),
    [
        (None, 3.0, False, 3.0, None),  # keeping up: the rate is what arrived, not capacity
        (40.0, 3.0, False, 3.0, None),  # the backlog ended: forgotten
        (None, 3.0, True, 3.0, 3.0),  # the first interval wholly in a backlog
        (40.0, 20.0, True, 30.0, 30.0),  # smoothed
        (40.0, None, True, 30.0, 40.0),  # no new reading
        (None, 0.0, True, 20.0, None),  # nothing committed: the workers are away
        (40.0, 0.0, True, 20.0, 40.0),  # away: what they served stays what they serve
        (None, 9.0, True, 0.0, None),  # back within the interval: it straddles the return
        (40.0, 9.0, True, None, 40.0),  # nothing read before it (a log that started over)
        (None, 156.0, True, 9.0, 156.0),  # serving throughout: a reading
    ],
)
def test_drain_capacity(
    known: float | None,
    interval_rate: float | None,
    within_backlog: bool,
    rate_before: float | None,
    expected: float | None,
) -> None:
    got = drain_capacity(
        known, interval_rate, within_backlog=within_backlog, rate_before=rate_before
    )
    assert got == expected


@pytest.mark.parametrize(
    ("span", "expected"),
    [
        pytest.param(CommitSpan(20, 0.5, 1, (0.5,)), 40.0, id="adjacent-reads"),
        pytest.param(CommitSpan(20, 0.5, 1), 40.0, id="adjacent-with-nothing-before"),
        pytest.param(CommitSpan(32, 2.0, 4, (2.0, 2.0)), 16.0, id="a-batch-every-4th-read"),
        pytest.param(CommitSpan(32, 1.5, 3, (1.0,)), 32 / 1.5, id="one-read-later-than-the-last"),
        pytest.param(CommitSpan(32, 1.25, 3, (0.5,)), 32 / 1.25, id="within-the-slack"),
        pytest.param(CommitSpan(32, 2.0, 4, (0.5, 0.5)), None, id="longer-than-batches-explain"),
        pytest.param(CommitSpan(20, 3.5, 7, (0.5,) * 4), None, id="steady-then-3s-away"),
        pytest.param(CommitSpan(20, 1.0, 2), None, id="nothing-to-compare-with"),
        pytest.param(CommitSpan(20, 0.5, 1, (8.0,)), 40.0, id="after-an-absence"),
        pytest.param(CommitSpan(20, 0.0, 1), None, id="no-time-passed"),
    ],
)
def test_span_rate(span: CommitSpan, expected: float | None) -> None:
    assert span_rate(span, interval_s=0.5) == (
        None if expected is None else pytest.approx(expected)
    )


@pytest.mark.parametrize(
    ("capacity", "served", "now", "expected"),
    [
        pytest.param(None, (100.0, 20.0), 101.0, None, id="capacity-unknown-stays-unknown"),
        pytest.param(1.3, (100.0, 20.0), 101.0, 20.0, id="a-stall-is-floored-by-what-they-served"),
        pytest.param(50.0, (100.0, 20.0), 101.0, 50.0, id="more-than-they-served-stands"),
        pytest.param(1.3, (100.0, 20.0), 131.0, 1.3, id="served-too-long-ago-is-forgotten"),
        pytest.param(1.3, None, 101.0, 1.3, id="never-kept-up"),
    ],
)
def test_admission_rate(
    capacity: float | None, served: tuple[float, float] | None, now: float, expected: float | None
) -> None:
    assert admission_rate(capacity, served, now=now, memory_s=30.0) == expected


@pytest.mark.parametrize(
    ("at_read", "routed_since", "rate", "elapsed_s", "expected"),
    [
        (100, 0, None, 0.0, 100),  # just read
        (100, 50, None, 0.3, 150),  # routed since, no drain known: all still queued
        (100, 1750, 3500.0, 0.5, 100),  # drained as fast as it came: the read holds
        (100, 2000, 3500.0, 0.5, 350),  # came faster than it drains: grows
        (100, 0, 3500.0, 0.5, 100),  # never below the read
    ],
)
def test_projected_depth(
    at_read: int, routed_since: int, rate: float | None, elapsed_s: float, expected: int
) -> None:
    assert (
        projected_depth(at_read, routed_since, drained_per_s=rate, elapsed_s=elapsed_s) == expected
    )


def test_a_partition_being_read_and_never_acked_counts_nothing() -> None:
    # `depth` runs between a refresh's reads: a partition listed, its committed offset not
    # read yet, and nothing routed to it by this ingest.
    queue = depths(acks=[(T, 0, 9)], committed={tp(0): 4})
    queue._partitions[T].add(tp(1))
    assert queue.depth(T) == 6


@pytest.mark.parametrize(
    ("restarted", "depth_t", "depth_other"),
    [
        # Kept: 6 (10 acked - 4 committed at the read) + 11 routed since = 17, and 5 + 11.
        # Forgotten: only what was routed since its log started over, from its next ack.
        pytest.param(frozenset({OTHER}), 17, 1, id="other-topic-only"),
        pytest.param(frozenset({T}), 1, 16, id="this-topic-only"),
        pytest.param(None, 1, 1, id="every-topic"),
    ],
)
def test_forgetting_restarted_logs_keeps_what_is_known_of_the_others(
    restarted: frozenset[str] | None, depth_t: int, depth_other: int
) -> None:
    queue = depths(acks=[(T, 0, 9), (OTHER, 0, 9)], committed={tp(0): 4, tp(0, OTHER): 5})
    assert (queue.depth(T), queue.depth(OTHER)) == (6, 5)
    queue.forget(restarted)
    queue.observe_ack(T, 0, 20)
    queue.observe_ack(OTHER, 0, 20)
    assert (queue.depth(T), queue.depth(OTHER)) == (depth_t, depth_other)


def test_a_depth_read_before_a_restart_is_not_kept_after_it() -> None:
    queue = depths(acks=[(T, 0, 9)], committed={tp(0): 4})
    assert queue.depth(T) == 6
    queue.forget(frozenset({T}))
    assert queue.depth(T) is None, "nothing known of the new log"


def test_forgetting_restarted_logs_keeps_what_the_workers_served() -> None:
    # The broker lost its logs, not the workers their speed: the backlog of what was sent
    # while it was away is priced at what they served before, not their reconnecting trickle.
    queue = depths(acks=[(T, 0, 9)], committed={tp(0): 4})
    queue._served[T] = (time.monotonic(), 20.0)
    queue.forget(None)
    queue._backlogged[T] = True
    assert queue.drain_rate(T) is None, "capacity not measured again yet"
    queue._rates[T] = 2.0
    assert queue.drain_rate(T) == 20.0


@pytest.mark.parametrize(
    ("routed_s_ago", "asked", "read"),
    [
        pytest.param(1.0, False, [T], id="routed-lately"),
        pytest.param(60.0, False, [], id="idle-not-read"),
        # Every request rejected, nothing routed for a minute: admission still asks, so the
        # depth is still read (it stayed at the figure that rejected them before).
        pytest.param(60.0, True, [T], id="rejecting-still-read"),
    ],
)
async def test_refresh_reads_the_topics_routed_to_or_asked_about(
    routed_s_ago: float, asked: bool, read: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = QueueDepths("unused:9092", refresh_ms=500, active_for_s=10.0)
    queue.watch_models(["demo-mlp"])
    queue._routed_at[T] = time.monotonic() - routed_s_ago
    if asked:
        queue.wanted(T)
    refreshed: list[str] = []

    async def refresh_group(group: str, topics: list[str]) -> None:
        refreshed.extend(topics)

    monkeypatch.setattr(queue, "_refresh_group", refresh_group)
    await queue.refresh()
    assert refreshed == read


def test_admission_asking_for_a_depth_marks_the_topic_wanted(tmp_path: Path) -> None:
    write_demo_models(tmp_path)
    queue = QueueDepths("unused:9092", refresh_ms=500)
    catalog = CachedModelCatalog(ModelRepository(tmp_path), refresh_s=60, depths=queue)
    catalog.queue_depth(T)
    assert T in queue._wanted_at


@pytest.mark.parametrize(
    ("name", "label"),
    [pytest.param("demo-mlp", "demo-mlp", id="known"), pytest.param("made-up", "-", id="unknown")],
)
def test_a_rejected_request_is_counted_under_a_known_model_or_none(
    clock: Clock, name: str, label: str
) -> None:
    catalog = make_catalog(CountingRepository())
    catalog.config("demo-mlp")
    assert metric_model(name, catalog.knows) == label


def test_a_read_left_stale_is_unknown_and_asks_for_a_fresh_one() -> None:
    """After a flood drains and the tier goes quiet, its last read (the flood's depth) is
    not read again; the first request after the quiet must not be refused on it."""
    queue = depths(acks=[(T, 0, 4999)], committed={tp(0): 40})
    assert queue.depth(T) == 4960
    queue._read_at[T] -= queue.active_for_s + 1
    queue._unread_routed.clear()

    assert queue.depth(T) is None
    assert queue._unread_routed.is_set(), "the refresh loop reads it at once"
    queue._unread_routed.clear()
    assert queue.depth(T) is None
    assert not queue._unread_routed.is_set(), "asked for at most once a refresh"
    queue.reserve(T)
    assert queue.depth(T) == 1, "what is being produced still counts"


def test_a_stale_read_stands_while_reads_fail() -> None:
    """A broker that cannot answer the depth reads must not open admission to all."""
    queue = depths(acks=[(T, 0, 4999)], committed={tp(0): 40})
    queue._read_at[T] -= queue.active_for_s + 1
    queue._reads_failing = True

    assert queue.depth(T) == 4960

"""Fetch waits: the traffic step, the reader's hold, and the live wait aiokafka reads."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest

from infra.pacing import (
    FetchPacer,
    gather_min_bytes,
    held_wait_ms,
    lane_waits,
    rhythm_next_gap,
    rhythm_wait_ms,
    step_wait_ms,
)
from infra.settings import KafkaSettings

SETTINGS = KafkaSettings(
    fetch_target_records=0,  # the gap rule alone; the records rule has its own tests
    fetch_rhythm_tolerance=0,  # and the rhythm rule too
    fetch_wait_busy_ms=5,
    fetch_wait_busy_max_ms=20,
    fetch_wait_quiet_share=0.25,
    fetch_wait_idle_ms=200,
    fetch_wait_asleep_ms=500,
    idle_after_s=2.0,
    asleep_after_s=30.0,
)


@pytest.mark.parametrize(
    ("quiet_s", "expected"),
    [
        pytest.param(0.0, 5, id="records-now"),
        pytest.param(0.019, 5, id="a-quarter-below-the-busy-wait"),
        pytest.param(0.040, 10, id="grows-with-the-quiet"),
        pytest.param(0.060, 15, id="a-quarter-of-the-gap"),
        pytest.param(0.5, 20, id="busy-cap"),
        pytest.param(1.99, 20, id="busy-cap-until-idle"),
        pytest.param(2.0, 200, id="idle"),
        pytest.param(29.9, 200, id="still-idle"),
        pytest.param(30.0, 500, id="asleep"),
        pytest.param(600.0, 500, id="long-asleep"),
    ],
)
def test_step_follows_quiet_time(quiet_s: float, expected: int) -> None:
    assert step_wait_ms(quiet_s, SETTINGS) == expected


@pytest.mark.parametrize(("quiet_s", "expected"), [(0.0, 5), (0.04, 10), (2.0, 20), (600.0, 20)])
def test_a_reader_expecting_records_never_idles(quiet_s: float, expected: int) -> None:
    assert step_wait_ms(quiet_s, SETTINGS, expecting=True) == expected


@pytest.mark.parametrize(
    ("overrides", "quiet_s", "expected"),
    [
        pytest.param({"fetch_wait_busy_ms": 30}, 0.0, 30, id="busy-above-the-busy-cap-wins"),
        pytest.param({"fetch_wait_busy_ms": 30}, 1.0, 30, id="busy-above-the-cap-stays"),
        pytest.param({"fetch_wait_busy_max_ms": 900}, 1.9, 200, id="cap-never-above-the-idle-wait"),
        pytest.param({"fetch_wait_quiet_share": 0.0}, 1.9, 5, id="share-0-keeps-the-busy-wait"),
    ],
)
def test_busy_growth_bounds(overrides: dict[str, Any], quiet_s: float, expected: int) -> None:
    settings = SETTINGS.model_copy(update=overrides)
    assert step_wait_ms(quiet_s, settings) == expected


@pytest.mark.parametrize(
    ("step_ms", "needed_in_s", "expected"),
    [
        (5, None, 5),  # wanted as they come
        (200, None, 200),  # idle consumer, nothing held
        (5, 0.0, 5),  # needed now
        (5, 0.008, 5),  # needed sooner than a step and the margin
        (5, 0.050, 45),  # waits until the margin before it is needed
        (5, 0.150, 145),
        (5, 5.0, 200),  # never past the cap (control records ride the same fetch)
        (5, -1.0, 5),  # the prediction passed: as they come
        (200, 0.050, 200),  # never below the traffic step
    ],
)
def test_held_wait(step_ms: int, needed_in_s: float | None, expected: int) -> None:
    assert held_wait_ms(step_ms, needed_in_s, margin_ms=5, cap_ms=200) == expected


class _Fetcher:
    def __init__(self) -> None:
        self._fetch_max_wait_ms = 5
        self._fetch_min_bytes = 1


class _Consumer:
    def __init__(self) -> None:
        self._fetcher = _Fetcher()


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _attached() -> tuple[FetchPacer, Any, _Clock]:
    clock, consumer = _Clock(), _Consumer()
    pacer = FetchPacer(consumer, SETTINGS, clock=clock)
    assert pacer.attach()
    return pacer, consumer._fetcher, clock


def test_fetcher_reads_the_live_wait() -> None:
    pacer, fetcher, clock = _attached()
    assert fetcher._fetch_max_wait_ms == 5
    pacer.hold_until(clock.now + 0.1)
    assert fetcher._fetch_max_wait_ms == 95
    clock.now += 0.05
    assert fetcher._fetch_max_wait_ms == 45  # asked afresh for each fetch built
    pacer.hold_until(None)
    assert fetcher._fetch_max_wait_ms == 12  # the traffic step: a quarter of 50 ms quiet
    pacer.observe(4)
    assert fetcher._fetch_max_wait_ms == 5


def test_traffic_steps_move_the_live_wait() -> None:
    pacer, fetcher, clock = _attached()
    clock.now += 3.0
    pacer.observe(0)
    assert (fetcher._fetch_max_wait_ms, pacer.idle) == (200, True)
    pacer.observe(7)
    assert (fetcher._fetch_max_wait_ms, pacer.idle) == (5, False)


def test_the_live_wait_grows_during_a_long_poll() -> None:
    """No poll returns while nothing comes: each fetch built reads the quiet afresh."""
    pacer, fetcher, clock = _attached()
    pacer.observe(3)
    clock.now += 0.04
    assert fetcher._fetch_max_wait_ms == 10
    clock.now += 2.0
    assert (fetcher._fetch_max_wait_ms, pacer.idle) == (200, True)


def test_an_expecting_reader_stays_brisk() -> None:
    clock, consumer, due = _Clock(), _Consumer(), [True]
    pacer = FetchPacer(consumer, SETTINGS, clock=clock, expecting=lambda: due[0])
    assert pacer.attach()
    clock.now += 60.0
    assert consumer._fetcher._fetch_max_wait_ms == 20
    due[0] = False
    assert consumer._fetcher._fetch_max_wait_ms == 500


@pytest.mark.parametrize(
    ("gaps_s", "expected"),
    [
        pytest.param([0.004] * 8, 5, id="steady-flow-stays-brisk"),
        pytest.param([0.060] * 16, 15, id="bursts-60-ms-apart"),
        pytest.param([0.060] * 8 + [0.002] * 8, 5, id="flow-resumes"),
        pytest.param([0.060] * 8 + [3.0], 5, id="after-an-idle-spell"),
        pytest.param([0.5] * 8, 20, id="sparse-capped"),
    ],
)
def test_the_wait_follows_the_gap_between_records(gaps_s: list[float], expected: int) -> None:
    """Right after records, the wait is a quarter of their usual spacing, not the busy wait."""
    pacer, fetcher, clock = _attached()
    for gap in gaps_s:
        clock.now += gap
        pacer.observe(1)
    assert fetcher._fetch_max_wait_ms == expected


RECORDS = SETTINGS.model_copy(update={"fetch_target_records": 8})


@pytest.mark.parametrize(
    ("rate_per_s", "quiet_s", "expected"),
    [
        pytest.param(0.0, 0.0, 5, id="no-rate-yet-busy-wait"),
        pytest.param(4000.0, 0.0, 5, id="fast-stream-8-records-in-2-ms-busy-wait"),
        pytest.param(800.0, 0.0, 10, id="800-a-second-waits-10-ms-for-8"),
        pytest.param(400.0, 0.0, 20, id="400-a-second-waits-20-ms"),
        pytest.param(20.0, 0.0, 20, id="slow-stream-capped"),
        pytest.param(800.0, 0.060, 15, id="the-quiet-rule-when-longer"),
        pytest.param(800.0, 2.0, 200, id="idle-all-the-same"),
    ],
)
def test_a_steady_stream_waits_for_a_few_records(
    rate_per_s: float, quiet_s: float, expected: int
) -> None:
    assert step_wait_ms(quiet_s, RECORDS, rate_per_s=rate_per_s) == expected


def test_the_pacer_learns_the_rate_and_forgets_it_after_idling() -> None:
    clock, consumer = _Clock(), _Consumer()
    pacer = FetchPacer(consumer, RECORDS, clock=clock)
    assert pacer.attach()
    for _ in range(12):
        clock.now += 0.005
        pacer.observe(4)  # 800 records a second
    assert consumer._fetcher._fetch_max_wait_ms == 10
    clock.now += 3.0
    pacer.observe(0)
    clock.now += 0.001
    pacer.observe(1)  # after an idle spell: brisk again, no remembered rate
    assert consumer._fetcher._fetch_max_wait_ms == 5


def test_wake_drops_a_hold() -> None:
    pacer, fetcher, clock = _attached()
    pacer.hold_until(clock.now + 1.0)
    pacer.wake()
    assert fetcher._fetch_max_wait_ms == 5


def test_the_fetchers_own_writes_are_ignored() -> None:
    _pacer, fetcher, _clock = _attached()
    fetcher._fetch_max_wait_ms = 900
    assert fetcher._fetch_max_wait_ms == 5


def test_attaching_twice_keeps_one_paced_class() -> None:
    pacer, fetcher, _ = _attached()
    paced = type(fetcher)
    assert pacer.attach()
    assert type(fetcher) is paced


def test_without_a_fetcher_it_says_so(caplog: pytest.LogCaptureFixture) -> None:
    pacer = FetchPacer(object(), SETTINGS)
    with caplog.at_level(logging.WARNING):
        assert not pacer.attach()
    assert "fetch_pacing_unavailable" in caplog.text


# ---- gathering: the least a fetch asks for -------------------------------------------------


@pytest.mark.parametrize(
    ("expected_records", "bytes_per_record", "share", "least"),
    [
        pytest.param(6.0, 800.0, 0.5, 2_400, id="half-of-6-records"),
        pytest.param(3.9, 800.0, 0.5, 1, id="under-2-records-answer-at-once"),
        pytest.param(4.0, 800.0, 0.5, 1_600, id="2-records"),
        pytest.param(40.0, 100.0, 0.25, 1_000, id="a-quarter"),
        pytest.param(6.0, 0.0, 0.5, 1, id="size-not-known-yet"),
        pytest.param(6.0, 800.0, 0.0, 1, id="off"),
    ],
)
def test_gather_min_bytes(
    expected_records: float, bytes_per_record: float, share: float, least: int
) -> None:
    assert gather_min_bytes(expected_records, bytes_per_record, share) == least


GATHER = RECORDS.model_copy(update={"fetch_gather_share": 0.5})


def _stream(pacer: FetchPacer, clock: _Clock, *, polls: int, gap_s: float, size: int) -> None:
    for _ in range(polls):
        clock.now += gap_s
        pacer.observe(1, size)


@pytest.mark.parametrize(
    ("gather", "gap_s", "hold", "least"),
    [
        # 300 a second: the wait is 20 ms (8 records would take 27), which brings 6.
        pytest.param(True, 1 / 300, False, 2_400, id="300-a-second-asks-for-3-records"),
        pytest.param(True, 1 / 50, False, 1, id="50-a-second-answered-at-once"),
        pytest.param(False, 1 / 300, False, 1, id="not-a-gathering-consumer"),
        pytest.param(True, 1 / 300, True, 1, id="a-held-fetch-takes-what-is-there"),
    ],
)
def test_a_gathering_fetcher_reads_the_least_it_asks_for(
    gather: bool, gap_s: float, hold: bool, least: int
) -> None:
    clock, consumer = _Clock(), _Consumer()
    pacer = FetchPacer(consumer, GATHER, clock=clock, gather=gather)
    assert pacer.attach()
    _stream(pacer, clock, polls=40, gap_s=gap_s, size=800)
    if hold:
        pacer.hold_until(clock.now + 0.05)

    assert consumer._fetcher._fetch_min_bytes == least


def test_a_gathering_consumer_that_idles_answers_at_once_again() -> None:
    clock, consumer = _Clock(), _Consumer()
    pacer = FetchPacer(consumer, GATHER, clock=clock, gather=True)
    assert pacer.attach()
    _stream(pacer, clock, polls=40, gap_s=1 / 300, size=800)
    assert consumer._fetcher._fetch_min_bytes > 1
    clock.now += 3.0

    assert consumer._fetcher._fetch_min_bytes == 1


@pytest.mark.parametrize(
    ("batch_lane", "asleep_ms", "idle_ms"),
    [
        pytest.param(False, 500, 200, id="request-path-lane"),
        pytest.param(True, 2000, 200, id="batch-lane-sleeps-deeper"),
    ],
)
def test_lane_waits(batch_lane: bool, asleep_ms: int, idle_ms: int) -> None:
    waits = lane_waits(SETTINGS, batch_lane=batch_lane)  # batch asleep: the default 2 s
    assert (waits.fetch_wait_asleep_ms, waits.fetch_wait_idle_ms) == (asleep_ms, idle_ms)
    assert step_wait_ms(31.0, waits) == asleep_ms


def test_a_batch_lane_never_sleeps_lighter_than_the_rest() -> None:
    with pytest.raises(ValueError, match="FETCH_WAIT_ASLEEP_BATCH_MS"):
        KafkaSettings(fetch_wait_asleep_ms=500, fetch_wait_asleep_batch_ms=400)


RHYTHM = SETTINGS.model_copy(update={"fetch_rhythm_tolerance": 0.3, "fetch_wait_busy_max_ms": 40})


@pytest.mark.parametrize(
    ("gaps_s", "expected"),
    [
        pytest.param([0.113] * 8, (0.113, 0.0), id="one-period"),
        pytest.param([0.035, 0.190] * 4, (0.035, 0.0), id="two-workers-out-of-phase"),
        pytest.param(
            [0.035, 0.190] * 4 + [0.036], (0.190, 0.001 / 6), id="lag-2-after-a-short-gap"
        ),
        pytest.param([0.02, 0.05, 0.3] * 3, (0.02, 0.0), id="three-producers"),
        pytest.param([0.1] * 6, None, id="too-few-gaps-to-check-a-lag"),
        pytest.param(
            [0.012, 0.160, 0.041, 0.095, 0.007, 0.220, 0.064, 0.031, 0.150, 0.088],
            None,
            id="poisson-like-no-rhythm",
        ),
        pytest.param([0.100, 0.120] * 4 + [0.100, 0.150], (0.1, 0.005), id="one-miss-in-six-holds"),
        pytest.param([0.100, 0.120] * 3 + [0.160, 0.060, 0.140, 0.090], None, id="a-lost-rhythm"),
        pytest.param([], None, id="no-gaps"),
    ],
)
def test_rhythm_next_gap(gaps_s: list[float], expected: tuple[float, float] | None) -> None:
    found = rhythm_next_gap(gaps_s, 0.15)
    if expected is None:
        assert found is None
    else:
        assert found == pytest.approx(expected, abs=1e-6)


def test_a_tolerance_of_0_finds_no_rhythm() -> None:
    assert rhythm_next_gap([0.1] * 12, 0.0) is None


@pytest.mark.parametrize(
    ("since_s", "next_gap", "expected"),
    [
        pytest.param(0.0, (0.190, 0.0), 195, id="lands-just-past-the-burst"),
        pytest.param(0.050, (0.190, 0.0), 145, id="less-what-has-passed"),
        pytest.param(0.0, (0.150, 0.004), 159, id="the-error-later"),
        pytest.param(0.160, (0.190, 0.0), None, id="due-within-the-busy-cap"),
        pytest.param(0.0, (0.035, 0.0), None, id="a-short-gap-is-the-steps-job"),
        pytest.param(0.0, (0.400, 0.0), 200, id="at-most-the-idle-wait"),
        pytest.param(0.0, None, None, id="no-rhythm"),
    ],
)
def test_rhythm_wait(
    since_s: float, next_gap: tuple[float, float] | None, expected: int | None
) -> None:
    assert rhythm_wait_ms(since_s, next_gap, RHYTHM) == expected


def test_a_rhythm_holds_the_fetch_until_the_next_burst_and_gathers_nothing() -> None:
    clock, consumer = _Clock(), _Consumer()
    pacer = FetchPacer(consumer, RHYTHM, clock=clock, gather=True, rhythm=True)
    assert pacer.attach()
    for gap in [0.035, 0.190] * 5:
        clock.now += gap
        pacer.observe(32, 32 * 400)
    # the last gap was 190 ms: the next is due 35 ms on, within the cap (the step rule)
    assert pacer.rhythm_ms() is None
    clock.now += 0.035
    pacer.observe(32, 32 * 400)
    # now the 190 ms gap is due: one fetch waits past it, asking for any byte
    assert consumer._fetcher._fetch_max_wait_ms == 195
    assert consumer._fetcher._fetch_min_bytes == 1
    clock.now += 0.100
    assert consumer._fetcher._fetch_max_wait_ms == 95
    clock.now += 0.080  # 10 ms before it is due: the step rule again
    assert pacer.rhythm_ms() is None
    assert consumer._fetcher._fetch_max_wait_ms == 40


def _after_bursts(
    rhythm: bool | Callable[[], bool],
) -> tuple[_Clock, _Consumer, FetchPacer]:
    """A reader that has seen ten bursts of 32 records, 150 ms apart."""
    clock, consumer = _Clock(), _Consumer()
    pacer = FetchPacer(consumer, RHYTHM, clock=clock, rhythm=rhythm)
    assert pacer.attach()
    for _ in range(10):
        clock.now += 0.150
        pacer.observe(32)
    return clock, consumer, pacer


def test_an_idle_spell_forgets_the_rhythm() -> None:
    clock, _, pacer = _after_bursts(rhythm=True)
    assert pacer.rhythm_ms() == 155
    clock.now += 3.0
    pacer.observe(1)
    assert pacer.rhythm_ms() is None


def test_a_reader_that_does_not_follow_rhythms_keeps_the_step() -> None:
    """A worker's fetches are held by its engine clock: bursts in a rhythm leave them be."""
    _, consumer, pacer = _after_bursts(rhythm=False)
    assert pacer.rhythm_ms() is None
    assert consumer._fetcher._fetch_max_wait_ms == 35  # a quarter of the smoothed spacing


def test_a_reader_follows_a_rhythm_only_while_its_callable_says_so() -> None:
    """The client stops parking its fetches while a critical request's result is due."""
    follow = [True]
    _, _, pacer = _after_bursts(rhythm=lambda: follow[0])
    assert pacer.rhythm_ms() is not None
    assert pacer.current_wait_ms() > RHYTHM.fetch_wait_busy_max_ms
    follow[0] = False
    assert pacer.rhythm_ms() is None
    assert pacer.current_wait_ms() <= RHYTHM.fetch_wait_busy_max_ms


LANES = KafkaSettings(fetch_wait_asleep_ms=500, fetch_wait_asleep_batch_ms=2000)
"""Defaults otherwise: busy cap 40 ms, records rule 16, gathering 1.0, critical cap 20."""


@pytest.mark.parametrize(
    ("lane", "critical_max", "expected"),
    [
        pytest.param("interactive", 20, (40, 16, 1.0, 500), id="interactive"),
        pytest.param("batch", 20, (40, 16, 1.0, 2000), id="batch-sleeps-deeper"),
        pytest.param("critical", 20, (20, 0, 0.0, 500), id="critical-latency-first"),
        pytest.param("critical", 0, (40, 16, 0.0, 500), id="critical-cap-off-no-gathering"),
    ],
)
def test_lane_waits_of_each_kind(
    lane: str, critical_max: int, expected: tuple[int, int, float, int]
) -> None:
    """(busy cap, records rule, gathering share, asleep wait) of each kind of lane."""
    base = LANES.model_copy(update={"fetch_wait_critical_max_ms": critical_max})
    w = lane_waits(base, batch_lane=lane == "batch", critical=lane == "critical")
    got = (w.fetch_wait_busy_max_ms, w.fetch_target_records, w.fetch_gather_share)
    assert (*got, w.fetch_wait_asleep_ms) == expected


def test_a_reader_waits_as_a_critical_lane_while_a_critical_result_is_due() -> None:
    """The client's reader: the records rule lets a 40 ms wait gather results, and a rhythm
    parks fetches; while a critical request's result is due, neither."""
    due = [False]
    clock, consumer = _Clock(), _Consumer()
    settings = RHYTHM.model_copy(update={"fetch_target_records": 16})
    pacer = FetchPacer(consumer, settings, clock=clock, rhythm=True, critical=lambda: due[0])
    assert pacer.attach()
    for _ in range(10):
        clock.now += 0.150
        pacer.observe(2)
    assert pacer.current_wait_ms() > settings.fetch_wait_critical_max_ms
    due[0] = True
    assert pacer.rhythm_ms() is None
    assert pacer.current_wait_ms() <= settings.fetch_wait_critical_max_ms

"""The throughput bench's open loop: Poisson arrivals, as the peers' load generator draws."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import orjson
import pytest

from schemas.topics import Tier
from services.bench.loadgen import EncoderEvents, LoadGenerator, LoadReport, poisson_arrivals
from services.runtime.publisher import Outgoing


def test_arrivals_are_ascending_at_the_rate() -> None:
    arrivals = poisson_arrivals(20_000, 300.0, seed=1)

    assert len(arrivals) == 20_000
    assert np.all(np.diff(arrivals) > 0)
    assert arrivals[-1] == pytest.approx(20_000 / 300.0, rel=0.03)


def test_arrivals_are_bursty_not_even() -> None:
    """Exponential gaps: their spread equals their mean (evenly paced would be 0)."""
    gaps = np.diff(poisson_arrivals(20_000, 300.0, seed=2))

    assert gaps.std() == pytest.approx(gaps.mean(), rel=0.05)


def test_a_seed_repeats_its_arrivals() -> None:
    np.testing.assert_array_equal(
        poisson_arrivals(100, 50.0, seed=3), poisson_arrivals(100, 50.0, seed=3)
    )


@pytest.mark.parametrize("rate", [0.0, -1.0])
def test_an_open_loop_needs_a_rate(rate: float) -> None:
    with pytest.raises(ValueError, match="rate above 0"):
        poisson_arrivals(10, rate, seed=1)


class _Sends:
    """Stands in for the generator's producer: records each send's size and stamps."""

    def __init__(self, report: LoadReport) -> None:
        self.report = report
        self.calls: list[np.ndarray] = []

    def __call__(self, count: int, lengths: object, *, arrived_at: np.ndarray) -> None:
        assert len(arrived_at) == count
        self.calls.append(np.asarray(arrived_at))
        self.report.sent += count


@pytest.mark.parametrize(("linger_s", "most_sends"), [(0.0, 400), (0.01, 60)])
async def test_an_open_loop_lingers_and_counts_latency_from_each_arrival(
    monkeypatch: pytest.MonkeyPatch, linger_s: float, most_sends: int
) -> None:
    """At 20,000 arrivals/s a 10 ms linger sends them in a few dozen batches, not one
    each; every request keeps its own arrival time as the start of its latency."""
    gen = LoadGenerator("127.0.0.1:1", lambda request_id, seq: b"")
    monkeypatch.setattr(gen, "_reset", lambda count: None)
    sends = _Sends(gen._report)
    monkeypatch.setattr(gen, "_send", sends)

    async def finish(progress: object) -> LoadReport:
        return gen._report

    monkeypatch.setattr(gen, "_finish", finish)
    monkeypatch.setattr(gen, "_tick", lambda progress: None)
    started = time.perf_counter()

    await gen.open_loop(400, 20_000.0, lambda: 32, lambda done: None, linger_s=linger_s)

    stamps = np.concatenate(sends.calls)
    expected = started + poisson_arrivals(400, 20_000.0, seed=1)
    assert len(stamps) == 400
    assert len(sends.calls) <= most_sends
    np.testing.assert_allclose(stamps, expected, atol=0.005)


@pytest.mark.parametrize(
    ("tier", "topic", "named", "follows"),
    [
        pytest.param(None, "inferbus.ingest", "interactive", True, id="shared-topic"),
        pytest.param("interactive", "inferbus.ingest.interactive", "interactive", True, id="int"),
        pytest.param("critical", "inferbus.ingest.critical", "critical", False, id="critical"),
    ],
)
async def test_a_tiers_load_goes_to_its_ingest_topic_and_names_its_tier(
    monkeypatch: pytest.MonkeyPatch, tier: Tier | None, topic: str, named: str, follows: bool
) -> None:
    """`bench throughput --tier critical` measures ingest's latency-first lane; its result
    reader does not follow rhythms (the client does not with a critical request out)."""
    events = EncoderEvents("demo-encoder", tier=tier or "interactive", encoding="b64")
    gen = LoadGenerator("127.0.0.1:1", events, tier=tier)
    sent: list[Outgoing] = []

    async def acked(records: list[Outgoing]) -> None:
        sent.extend(records)

    monkeypatch.setattr(gen, "_acked", acked)
    gen._send(1, lambda: 8)
    await asyncio.gather(*gen._sends)
    [record] = sent
    assert record.topic == topic
    assert orjson.loads(record.value)["tier"] == named
    assert gen._pacer._rhythm() is follows
    critical_max = gen._pacer.settings.fetch_wait_critical_max_ms
    assert (gen._pacer.settings.fetch_wait_busy_max_ms <= critical_max) is not follows

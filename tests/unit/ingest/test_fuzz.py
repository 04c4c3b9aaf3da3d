"""Fuzzing ingest: whatever the bytes, each event gets exactly one outcome and nothing raises.

`handle_event` (one event) and `IngestService.handle` (a poll) get bytes, JSON of any
shape, unicode (lone surrogates too), huge numbers, nesting up to 100,000 deep, frames
that lie about their lengths, and events over the size limit. Every event must come out
as exactly one Route, Answer or DeadLetter that ingest can send as it stands, and a storm
of big and deep events must leave ingest's memory where it was.
"""

from __future__ import annotations

import gc
import json
import os
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from aiokafka.structs import ConsumerRecord, RecordMetadata
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas import headers as h
from schemas.frames import MAGIC, join_frame
from schemas.result import InferenceResult
from schemas.topics import DLQ, INGEST, is_legal_topic
from services.ingest.app import IngestService
from services.ingest.handlers import Answer, DeadLetter, Outcome, Route, handle_event
from services.ingest.settings import IngestSettings
from services.models.demo import encoder_config, mlp_config, write_demo_models
from tests.unit.ingest.conftest import NOW, PRODUCED_AT, FakeCatalog, mlp_event

LIMITS = IngestSettings(max_event_bytes=65_536, max_tensor_bytes=4_096, max_samples_per_request=8)
CATALOG = FakeCatalog(
    configs={"demo-mlp": mlp_config(), "demo-encoder": encoder_config()},
    versions={"demo-mlp": ["1"], "demo-encoder": ["1"]},
)
FUZZ = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# ---- strategies ------------------------------------------------------------------------

ids = st.one_of(
    st.text(max_size=200),
    st.sampled_from(["\ud800", "a\udfffb", "\x00", "r\n", "", " " * 129, "é" * 128, "🦀" * 40]),
)
leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**400), max_value=10**400),
    st.floats(allow_nan=True, allow_infinity=True),
    ids,
)
json_values = st.recursive(
    leaves,
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(ids, inner, max_size=6),
    max_leaves=40,
)


def dumps(value: Any) -> bytes:
    """JSON as a careless producer writes it: NaN and Infinity, any unicode, escaped."""
    return json.dumps(value, allow_nan=True).encode()


FIELDS = [
    "schema_version",
    "request_id",
    "model",
    "model_version",
    "tier",
    "inputs",
    "deadline",
    "timeout_ms",
    "reply_to",
    "tenant",
    "created_at",
    "metadata",
]
TENSOR_FIELDS = ["dtype", "shape", "data", "b64", "raw"]


@st.composite
def mutated_requests(draw: st.DrawFn) -> bytes:
    """A valid demo-mlp request with a few fields (or tensor fields) removed or replaced."""
    event = mlp_event(request_id=draw(st.text(min_size=1, max_size=40)))
    tensor: dict[str, Any] = event["inputs"]["x"]
    for _ in range(draw(st.integers(1, 4))):
        target, keys = draw(st.sampled_from([(event, FIELDS), (tensor, TENSOR_FIELDS)]))
        key = draw(st.sampled_from(keys))
        if draw(st.booleans()):
            target.pop(key, None)
        else:
            target[key] = draw(json_values)
    return dumps(event)


def nested_text(depth: int, kind: str) -> str:
    if kind == "arrays":
        return "[" * depth + "0.5" + "]" * depth
    return '{"a":' * depth + "1" + "}" * depth


@st.composite
def deep_events(draw: st.DrawFn) -> bytes:
    """Valid JSON nested up to 100,000 deep, in the tensor data, metadata, id or whole."""
    depth = draw(st.integers(1, 100_000))
    kind = draw(st.sampled_from(["arrays", "objects"]))
    where = draw(st.sampled_from(["data", "metadata", "request_id", "whole"]))
    deep = nested_text(depth, kind)
    if where == "whole":
        return deep.encode()
    placeholder = "__deep__"
    event = mlp_event()
    if where == "data":
        event["inputs"]["x"]["data"] = placeholder
    else:
        event[where] = placeholder
    return dumps(event).replace(json.dumps(placeholder).encode(), deep.encode(), 1)


@st.composite
def sized_events(draw: st.DrawFn) -> bytes:
    """A valid request padded to around and beyond the event size limit."""
    size = draw(st.integers(0, 3 * LIMITS.max_event_bytes))
    return dumps(mlp_event(metadata={"pad": "x" * size}))


@st.composite
def frames(draw: st.DrawFn) -> bytes:
    """Binary frames whose lengths and raw slices may lie."""
    if draw(st.booleans()):
        length = draw(st.integers(0, 2**32 - 1))
        return struct.pack(">4sI", MAGIC, length) + draw(st.binary(max_size=64))
    event = mlp_event()
    event["inputs"]["x"] = {
        "dtype": draw(st.sampled_from(["float32", "float64", "int64", "bool", "nope"])),
        "shape": draw(st.lists(st.integers(-2, 20), max_size=3)),
        "raw": {
            "offset": draw(st.integers(-5, 100)),
            "nbytes": draw(st.integers(-5, 100)),
        },
    }
    return join_frame(dumps(event), [draw(st.binary(max_size=128))])


@st.composite
def truncated(draw: st.DrawFn) -> bytes:
    whole = dumps(mlp_event())
    return whole[: draw(st.integers(0, len(whole) - 1))]


any_event = st.one_of(
    st.binary(max_size=2_048),
    json_values.map(dumps),
    mutated_requests(),
    deep_events(),
    sized_events(),
    frames(),
    truncated(),
)

# ---- the invariant -------------------------------------------------------------------


def check(value: bytes | None, outcome: Outcome) -> None:
    """One outcome, and one that ingest can send as it stands."""
    assert isinstance(outcome, Route | Answer | DeadLetter)
    if isinstance(outcome, DeadLetter):
        assert outcome.value == (value or b""), "the DLQ keeps the producer's bytes"
        assert str(outcome.error), "and says why"
    elif isinstance(outcome, Answer):
        result = outcome.result
        assert result.status != "ok"
        assert 0 < len(result.request_id) <= 128
        assert is_legal_topic(outcome.topic)
        assert outcome.key == result.request_id.encode()
        assert result.model_dump_json(exclude_none=True), "ingest encodes it so"
    else:
        assert outcome.value == value, "a route carries the producer's bytes unchanged"
        assert outcome.topic.startswith("inferbus.req.")


def handle(value: bytes | None) -> Outcome:
    return handle_event(value, produced_at=PRODUCED_AT, catalog=CATALOG, settings=LIMITS, now=NOW)


# ---- one event -------------------------------------------------------------------------


@FUZZ
@given(any_event)
def test_every_event_gets_exactly_one_outcome(value: bytes) -> None:
    check(value, handle(value))


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(None, id="tombstone"),
        pytest.param(b"", id="empty"),
        pytest.param(nested_text(1_000_000, "arrays").encode(), id="a-million-deep"),
        pytest.param(dumps(mlp_event(request_id="r" * 10_000)), id="10k-char-id"),
        pytest.param(dumps(mlp_event(request_id="\ud800")), id="lone-surrogate-id"),
        pytest.param(b'{"request_id": "r-1", "x": NaN, ' + b"[" * 50_000, id="nan-then-deep"),
    ],
)
def test_edge_events(value: bytes | None) -> None:
    check(value, handle(value))


def test_a_valid_event_is_routed() -> None:
    outcome = handle(dumps(mlp_event()))
    assert isinstance(outcome, Route)


# ---- a poll ------------------------------------------------------------------------------


class AckingPublisher:
    """Acks every record, in order."""

    def __init__(self) -> None:
        self.sent: list[Any] = []

    async def send_all(self, records: Sequence[Any]) -> list[Any]:
        acks = []
        for outgoing in records:
            self.sent.append(outgoing)
            acks.append(RecordMetadata(outgoing.topic, 0, None, len(self.sent), -1, -1, -1))
        return acks


def record(value: bytes | None, offset: int) -> ConsumerRecord[bytes, bytes]:
    size = len(value) if value is not None else 0
    return ConsumerRecord(INGEST, 0, offset, 0, 0, None, value, None, size, 0, ())


async def handle_poll(models: Path, values: list[bytes | None]) -> list[Any]:
    """One ingest, one poll of these values; the records it produced."""
    ingest = IngestService("127.0.0.1:1", IngestSettings(models_dir=models))
    publisher = AckingPublisher()
    ingest.publisher = publisher  # type: ignore[assignment]
    try:
        await ingest.handle([record(v, offset) for offset, v in enumerate(values)])
        assert ingest.offsets.in_flight(INGEST, 0) == 0, "every record counts as answered"
    finally:
        await ingest.producer.stop()
    return publisher.sent


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("models")
    write_demo_models(root)
    return root


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(st.lists(any_event | st.none(), min_size=1, max_size=12))
async def test_a_poll_of_anything_produces_one_record_per_event(
    models: Path, values: list[bytes | None]
) -> None:
    sent = await handle_poll(models, values)
    assert len(sent) == len(values)
    for offset, (value, outgoing) in enumerate(zip(values, sent, strict=True)):
        if outgoing.topic == DLQ:
            assert outgoing.value == (value or b"")
            assert h.header(outgoing.headers, h.SOURCE_OFFSET) == str(offset)
        elif outgoing.topic.startswith("inferbus.req."):
            assert outgoing.value == value
        else:
            assert is_legal_topic(outgoing.topic), "an answer, on a legal reply topic"
            assert InferenceResult.from_wire(outgoing.value).status != "ok"


# ---- memory ------------------------------------------------------------------------------

BIG = 5 * 1024 * 1024
STORM_POLLS = 12
POLL_SIZE = 8
RSS_GROWTH_BOUND_MB = 100.0
"""After 48 events of 5 MB (240 MB) and 48 deep or 10k-id ones, resident memory may stay this
much above where it was at most (measured: ~20 MB); keeping each big event would be 240."""


def rss_mb() -> float:
    for line in Path(f"/proc/{os.getpid()}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS in /proc/self/status")


def storm_poll(seed: int) -> list[bytes | None]:
    pad = "x" * BIG
    out: list[bytes | None] = []
    for i in range(POLL_SIZE):
        if i % 4 == 3:
            out.append(nested_text(100_000 + seed, "arrays").encode())
        elif i % 4 == 2:
            out.append(dumps(mlp_event(request_id=f"r{seed}-{i}" + "i" * 10_000)))
        else:
            out.append(dumps(mlp_event(request_id=f"r{seed}-{i}", metadata={"pad": pad})))
    return out


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads RSS from /proc")
async def test_a_storm_of_big_and_deep_events_leaves_memory_bounded(models: Path) -> None:
    await handle_poll(models, storm_poll(0))  # allocator and caches warm
    gc.collect()
    baseline = rss_mb()
    peak = baseline
    for seed in range(1, STORM_POLLS + 1):
        sent = await handle_poll(models, storm_poll(seed))
        assert len(sent) == POLL_SIZE
        del sent
        peak = max(peak, rss_mb())
    gc.collect()
    after = rss_mb()
    assert after - baseline < RSS_GROWTH_BOUND_MB, (
        f"RSS {baseline:.0f} -> {after:.0f} MB (peak {peak:.0f}) after {STORM_POLLS} polls"
    )


def test_the_storm_is_what_it_says() -> None:
    values = storm_poll(1)
    defaults = IngestSettings()
    outcomes = [
        handle_event(v, produced_at=NOW, catalog=CATALOG, settings=defaults, now=NOW)
        for v in values
    ]
    big = [v for v in values if v is not None and len(v) > BIG]
    assert len(big) == POLL_SIZE // 2
    assert all(isinstance(o, Answer | DeadLetter) for o in outcomes)

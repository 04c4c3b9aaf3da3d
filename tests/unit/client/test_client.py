"""Client without a broker: wire inputs, the bounded memory of seen ids, and result dedupe."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from aiokafka.structs import ConsumerRecord, RecordMetadata, TopicPartition

from schemas import headers as h
from schemas.frames import CONTENT_TYPE as FRAME_CONTENT_TYPE
from schemas.parse import parse_request
from schemas.result import InferenceResult, error_result
from schemas.tensors import Tensor, TextInput
from services.client import client as client_module
from services.client.client import InferenceClient
from services.client.pending import PendingRequests
from services.client.restarts import RestartDetector, resend_after_s, restart_suspects
from services.client.seen import SeenIds
from services.client.wire import to_wire_inputs

REPLY = "inferbus.results"


# ---- to_wire_inputs ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "kind", "decoded"),
    [
        pytest.param(
            np.ones((1, 16), np.float32), Tensor, np.ones((1, 16), np.float32), id="ndarray"
        ),
        pytest.param(
            np.arange(6, dtype=np.int64).reshape(2, 3),
            Tensor,
            np.arange(6, dtype=np.int64).reshape(2, 3),
            id="int-ndarray",
        ),
        pytest.param(
            Tensor(dtype="float32", shape=[1], data=[1.0]),
            Tensor,
            np.ones(1, np.float32),
            id="tensor",
        ),
        pytest.param("hello", TextInput, ["hello"], id="text"),
        pytest.param(["a", "b"], TextInput, ["a", "b"], id="texts"),
        pytest.param(TextInput(text="x"), TextInput, ["x"], id="text-input"),
        # Regression: any list became TextInput, so a nested list of numbers was refused.
        pytest.param([[0.5, 1.5]], Tensor, np.array([[0.5, 1.5]]), id="nested-number-list"),
        pytest.param([1, 2, 3], Tensor, np.array([1, 2, 3]), id="number-list"),
    ],
)
def test_to_wire_inputs(value: Any, kind: type, decoded: Any) -> None:
    [(name, wire)] = to_wire_inputs({"in": value}).items()

    assert name == "in"
    assert isinstance(wire, kind)
    if isinstance(wire, Tensor):
        np.testing.assert_array_equal(wire.to_numpy(), decoded)
        assert wire.to_numpy().dtype == np.asarray(decoded).dtype
    else:
        assert wire.texts() == decoded


def test_arrays_travel_as_base64() -> None:
    wire = to_wire_inputs({"x": np.zeros((2, 16), np.float32)})["x"]

    assert isinstance(wire, Tensor)
    assert wire.b64 is not None
    assert wire.data is None


# ---- SeenIds ------------------------------------------------------------------------------


def test_seen_ids_report_the_first_sighting_only() -> None:
    seen = SeenIds(capacity=10)

    assert [seen.add(i) for i in ("a", "b", "a", "b", "c")] == [True, True, False, False, True]
    assert "a" in seen
    assert "z" not in seen


def test_seen_ids_forget_the_oldest_beyond_capacity() -> None:
    seen = SeenIds(capacity=3)
    for request_id in ("a", "b", "c", "d"):
        seen.add(request_id)

    assert "a" not in seen
    assert seen.add("a") is True  # forgotten, so new again
    assert seen.add("d") is False


# ---- _deliver ------------------------------------------------------------------------------


def result(request_id: str, status: str = "ok") -> InferenceResult:
    if status == "ok":
        return InferenceResult(request_id=request_id, model="demo-mlp", status="ok")
    return error_result(request_id, "demo-mlp", status, "why")  # type: ignore[arg-type]


def record(value: bytes | None, offset: int = 0) -> ConsumerRecord[bytes, bytes]:
    return ConsumerRecord(
        topic=REPLY,
        partition=0,
        offset=offset,
        timestamp=0,
        timestamp_type=0,
        key=None,
        value=value,
        checksum=None,
        serialized_key_size=0,
        serialized_value_size=len(value or b""),
        headers=[],
    )


def deliver(client: InferenceClient, *results: InferenceResult | bytes | None) -> None:
    for i, item in enumerate(results):
        value = item.model_dump_json().encode() if isinstance(item, InferenceResult) else item
        client._deliver(record(value, offset=i))


def streamed(client: InferenceClient) -> list[str]:
    out = [r.request_id for r in client._stream]
    client._stream.clear()
    return out


@pytest.fixture
def client() -> InferenceClient:
    """Not started: `_deliver` needs no broker."""
    return InferenceClient("localhost:1", reply_to=REPLY)


@pytest.mark.parametrize(
    ("mine", "see_all", "delivered", "streamed_ids", "dropped"),
    [
        pytest.param({"r1"}, False, ["r1"], ["r1"], 0, id="one-result"),
        pytest.param(
            {"r1"}, False, ["r1", "r1", "r1"], ["r1"], 2, id="repeats-dropped-and-counted"
        ),
        pytest.param({"r1"}, False, ["r2"], [], 0, id="other-clients-result-ignored"),
        pytest.param({"r1", "r2"}, False, ["r2", "r1", "r2"], ["r2", "r1"], 1, id="interleaved"),
        pytest.param(set(), True, ["x", "y", "x"], ["x", "y"], 1, id="see-all-dedupes"),
        pytest.param({"r1"}, False, ["r1:internal_error", "r1"], ["r1"], 1, id="error-then-repeat"),
    ],
)
def test_deliver_dedupes_by_request_id(
    client: InferenceClient,
    mine: set[str],
    see_all: bool,
    delivered: list[str],
    streamed_ids: list[str],
    dropped: int,
) -> None:
    for request_id in mine:
        client._mine.add(request_id, deadline_in_s=30.0)
    client.see_all_results = see_all

    deliver(client, *(result(*item.split(":")) for item in delivered))

    assert streamed(client) == streamed_ids
    assert client.duplicates_dropped == dropped
    assert not any(request_id in client._mine for request_id in streamed_ids)


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(None, id="tombstone"),
        pytest.param(b"not json", id="not-json"),
        pytest.param(b'{"request_id": "r1"}', id="not-a-result"),
        pytest.param(b'{"request_id": "r1", "model": "m", "status": "maybe"}', id="bad-status"),
    ],
)
def test_deliver_skips_records_that_are_not_results(
    client: InferenceClient, value: bytes | None
) -> None:
    client._mine.add("r1", deadline_in_s=30.0)

    deliver(client, value)

    assert streamed(client) == []
    assert "r1" in client._mine
    deliver(client, result("r1"))  # the real result still gets through
    assert streamed(client) == ["r1"]


async def test_deliver_completes_the_waiter_once(client: InferenceClient) -> None:
    future: asyncio.Future[InferenceResult] = asyncio.get_running_loop().create_future()
    client._waiters["r1"] = [future]

    deliver(client, result("r1", "deadline_exceeded"), result("r1"))

    assert future.done()
    assert future.result().status == "deadline_exceeded"
    assert client.duplicates_dropped == 1
    # `infer` returns it: not kept again for a `results()` reader an infer-only client lacks.
    assert streamed(client) == []


async def test_an_infer_only_client_keeps_no_results(client: InferenceClient) -> None:
    loop = asyncio.get_running_loop()
    futures = {}
    for i in range(100):
        futures[f"r{i}"] = loop.create_future()
        client._waiters[f"r{i}"] = [futures[f"r{i}"]]
    client._mine.add("s1", deadline_in_s=30.0)  # one submitted without a waiter

    deliver(client, *(result(request_id) for request_id in [*futures, "s1"]))

    assert all(f.done() for f in futures.values())
    assert streamed(client) == ["s1"]


def test_results_nobody_reads_are_kept_only_so_many(
    client: InferenceClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(client_module, "STREAM_KEPT", 5)
    ids = [f"s{i}" for i in range(8)]
    for request_id in ids:
        client._mine.add(request_id, deadline_in_s=30.0)

    deliver(client, *(result(request_id) for request_id in ids))

    assert streamed(client) == ids[3:]  # the newest five, oldest first
    assert client.results_unread_dropped == 3


async def test_results_yields_what_arrives_while_it_waits(client: InferenceClient) -> None:
    # Started as far as results() can tell (a client never started is refused): a reader
    # that reads nothing, the test delivers.
    client._reader = asyncio.create_task(asyncio.Event().wait())
    client._mine.add("s1", deadline_in_s=30.0)
    client._mine.add("s2", deadline_in_s=30.0)
    stream = client.results()
    first = asyncio.ensure_future(anext(stream))
    await asyncio.sleep(0)
    assert not first.done()

    deliver(client, result("s1"), result("s2"))

    assert (await asyncio.wait_for(first, 1)).request_id == "s1"
    assert (await asyncio.wait_for(anext(stream), 1)).request_id == "s2"
    client._reader.cancel()


async def test_deliver_leaves_a_cancelled_waiter_alone(client: InferenceClient) -> None:
    future: asyncio.Future[InferenceResult] = asyncio.get_running_loop().create_future()
    future.cancel()
    client._waiters["r1"] = [future]

    deliver(client, result("r1"))

    assert streamed(client) == ["r1"]


def test_build_request_uses_the_clients_reply_topic_and_tenant() -> None:
    client = InferenceClient("localhost:1", reply_to="team-a.results", tenant="team-a")

    wire = client.build_request(
        "demo-mlp", {"x": np.zeros((1, 16), np.float32)}, tier="batch", timeout_ms=500
    )

    request = wire.envelope
    assert (request.reply_to, request.tenant, request.tier) == ("team-a.results", "team-a", "batch")
    assert request.timeout_ms == 500
    assert request.created_at is not None
    assert wire.request_id == request.request_id


@pytest.mark.parametrize("form", ["frame", "json"])
def test_built_requests_parse_back_to_the_same_arrays(form: str) -> None:
    client = InferenceClient("localhost:1")
    x = np.arange(32, dtype=np.float32).reshape(2, 16)
    ids = np.arange(6, dtype=np.int64).reshape(1, 6)
    wire = client.build_request("demo-mlp", {"x": x, "ids": ids}, form=form)  # type: ignore[arg-type]

    value, content_type = wire.encode()
    parsed = parse_request(value)

    assert parsed.framed is (form == "frame")
    assert content_type == (FRAME_CONTENT_TYPE if form == "frame" else h.JSON)
    inputs = parsed.request.inputs
    np.testing.assert_array_equal(inputs["x"].to_numpy(parsed.payload), x)  # type: ignore[union-attr]
    np.testing.assert_array_equal(inputs["ids"].to_numpy(parsed.payload), ids)  # type: ignore[union-attr]


async def test_submit_before_start_says_so(client: InferenceClient) -> None:
    request = client.build_request("demo-mlp", {"x": np.zeros((1, 16), np.float32)})

    with pytest.raises(RuntimeError, match="not started"):
        await client.submit(request)


def test_an_overdue_request_stops_keeping_the_reader_brisk_and_a_late_result_still_comes(
    client: InferenceClient,
) -> None:
    now = [0.0]
    client._mine = PendingRequests(grace_s=10.0, clock=lambda: now[0])
    client._mine.add("r1", deadline_in_s=1.0)
    assert client._expecting()
    now[0] = 11.0
    assert not client._expecting()
    assert client.results_overdue == 1

    deliver(client, result("r1"))  # the worker came back and answered late

    assert streamed(client) == ["r1"]
    assert "r1" not in client._mine


def test_a_repeat_of_a_request_sent_again_ends_its_pending(client: InferenceClient) -> None:
    """Answered, then sent again after a broker restart: the repeat answer is dropped as a
    duplicate, and the request is no longer due (it would count as overdue later)."""
    client._mine.add("r1", deadline_in_s=30.0)
    deliver(client, result("r1"))
    client._mine.add("r1", deadline_in_s=30.0)  # the resubmit

    deliver(client, result("r1"))

    assert streamed(client) == ["r1"]
    assert client.duplicates_dropped == 1
    assert "r1" not in client._mine
    assert not client._mine.any_due()


# ---- resends after a broker restart --------------------------------------------------------


@pytest.mark.parametrize(
    ("left_s", "after_s"),
    [
        pytest.param(None, 5.0, id="no-limit"),
        pytest.param(30.0, 5.0, id="plenty-left"),
        pytest.param(10.0, 5.0, id="twice-the-wait-left"),
        pytest.param(6.0, 3.0, id="half-of-what-is-left"),
        pytest.param(1.5, 1.0, id="floor"),
        pytest.param(-2.0, 1.0, id="past-its-time"),
    ],
)
def test_resend_after_s(left_s: float | None, after_s: float) -> None:
    assert resend_after_s(left_s) == after_s


@pytest.mark.parametrize(
    ("acked_ago_s", "left_s", "due"),
    [
        pytest.param(None, 10.0, False, id="not-acked-yet"),
        pytest.param(4.0, 20.0, False, id="young-with-time-left"),
        pytest.param(5.0, 20.0, True, id="old"),
        # Sent while the broker was away: acked late, with little of its time left.
        pytest.param(2.0, 4.0, True, id="young-but-its-time-runs-out"),
        pytest.param(0.5, 1.0, False, id="just-sent-again"),
    ],
)
def test_a_request_is_sent_again_by_its_age_and_the_time_it_has_left(
    client: InferenceClient, acked_ago_s: float | None, left_s: float, due: bool
) -> None:
    now = 1_000.0
    if acked_ago_s is not None:
        client._sent_at["r1"] = now - acked_ago_s
    client._give_up_at["r1"] = now + left_s

    assert client._resend_due("r1", now) is due


async def test_a_request_sent_again_waits_again_before_the_next_resend(
    client: InferenceClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The resend's ack may take seconds after a restart: the watch, a second later, must
    not send it once more meanwhile."""
    resent: list[str] = []

    async def resubmit(wire: Any) -> None:
        resent.append(wire.request_id)

    monkeypatch.setattr(client, "_resubmit", resubmit)
    request = client.build_request("m", {"in": np.ones((1, 2), np.float32)}, request_id="r1")
    client._pending["r1"] = request
    now = time.monotonic()
    client._sent_at["r1"] = now - 6.0
    client._give_up_at["r1"] = now + 20.0

    client._resubmit_pending(every_one=False)
    await asyncio.sleep(0)
    client._resubmit_pending(every_one=False)
    await asyncio.sleep(0)

    assert resent == ["r1"]
    assert client.resubmitted == 1


async def test_a_request_sent_again_after_its_answer_gets_the_new_answer(
    client: InferenceClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: the second answer was dropped as a repeat and `infer` timed out."""
    produced: list[str] = []

    async def produce(wire: Any) -> str:  # what the real one does, less the broker
        produced.append(wire.request_id)
        client._mine.add(wire.request_id, deadline_in_s=30.0)
        return str(wire.request_id)

    monkeypatch.setattr(client, "_produce", produce)
    request = client.build_request("m", {"in": np.ones((1, 2), np.float32)}, request_id="r1")
    await client.submit(request)
    deliver(client, result("r1"))
    assert streamed(client) == ["r1"]

    await client.submit(request)
    deliver(client, result("r1"))

    assert produced == ["r1", "r1"]
    assert streamed(client) == ["r1"], "the second answer is an answer, not a repeat"
    assert client.duplicates_dropped == 0


class _AckingPublisher:
    """Acks every record at offset 0, as the broker would, without one."""

    async def send_all(self, outgoing: list[Any]) -> list[RecordMetadata]:
        return [
            RecordMetadata(o.topic, 0, TopicPartition(o.topic, 0), 0, 0, 0, 0) for o in outgoing
        ]


@pytest.mark.parametrize(
    ("tier", "follows_while_out"),
    [
        pytest.param("critical", False, id="critical-stops-the-rhythm"),
        pytest.param("interactive", True, id="interactive-keeps-it"),
        pytest.param("batch", True, id="batch-keeps-it"),
    ],
)
async def test_the_reader_waits_as_a_critical_lane_while_a_critical_result_is_due(
    client: InferenceClient, tier: Any, follows_while_out: bool
) -> None:
    """A fetch parked until the next burst, or waiting for the records rule, would hold a
    critical result; the reader's pacer asks `any_urgent_due` for every fetch it builds."""
    client._publisher = _AckingPublisher()  # type: ignore[assignment]
    request = client.build_request(
        "m", {"in": np.ones((1, 2), np.float32)}, tier=tier, request_id="r1"
    )
    assert not client._mine.any_urgent_due()
    await client.submit(request)
    assert client._mine.any_urgent_due() is not follows_while_out
    deliver(client, result("r1"))
    assert not client._mine.any_urgent_due()


# ---- telling a restarted broker from a log's last batch --------------------------------------

P0, P1 = ("inferbus.ingest", 0), ("inferbus.ingest", 1)


@pytest.mark.parametrize(
    ("acked", "ends", "suspects"),
    [
        pytest.param({P0: 9}, {P0: 10}, {}, id="end-past-the-ack"),
        pytest.param({P0: 9}, {P0: 9}, {P0: 9}, id="end-at-the-ack-restart-or-batch"),
        pytest.param({P0: 9}, {P0: 0}, {P0: 0}, id="empty-log-after-acks"),
        pytest.param({P0: 9, P1: 3}, {P0: 12, P1: 2}, {P1: 2}, id="only-the-one-that-went-back"),
        pytest.param({}, {P0: 0}, {}, id="nothing-acked-before-the-snapshot"),
    ],
)
def test_a_log_ending_at_or_before_an_acked_offset_is_a_suspect(
    acked: dict[tuple[str, int], int],
    ends: dict[tuple[str, int], int],
    suspects: dict[tuple[str, int], int],
) -> None:
    assert restart_suspects(acked, ends) == suspects


class _Ends:
    """A consumer whose `end_offsets` answers `ends`, running `meanwhile` first (an ack
    that arrives while the request is on its way)."""

    def __init__(self, ends: dict[tuple[str, int], int], meanwhile: Any = None) -> None:
        self.ends, self.meanwhile = ends, meanwhile

    async def end_offsets(self, tps: list[Any]) -> dict[Any, int]:
        if self.meanwhile is not None:
            self.meanwhile()
        return {tp: self.ends[(tp.topic, tp.partition)] for tp in tps}


class _Probe:
    """A `LogEndProbe` that says whether its suspects are past the log, and records them."""

    def __init__(self, past: bool) -> None:
        self.past, self.asked = past, list[tuple[dict[Any, int], dict[Any, int]]]()

    async def judge(self, suspects: dict[Any, int], positions: dict[Any, int]) -> Any:
        self.asked.append((dict(suspects), dict(positions)))
        return SimpleNamespace(past=list(suspects) if self.past else [], unknown=[])


def _watching(
    client: InferenceClient, consumer: _Ends, probe: _Probe, acked: dict[tuple[str, int], int]
) -> None:
    cluster = SimpleNamespace(partitions_for_topic=lambda topic: {0, 1})
    client._producer = SimpleNamespace(client=SimpleNamespace(cluster=cluster))  # type: ignore[assignment]
    client._consumer = consumer  # type: ignore[assignment]
    client._log_ends = probe  # type: ignore[assignment]
    for tp, offset in acked.items():
        client._restarts.acked(tp, offset)


@pytest.mark.parametrize(
    ("acked", "ends", "past", "restarted", "judged"),
    [
        pytest.param({P0: 9}, {P0: 10}, True, False, [], id="end-past-every-ack"),
        pytest.param({P0: 9}, {P0: 5}, False, False, [{P0: 10}], id="inside-the-last-batch"),
        pytest.param({P0: 9}, {P0: 0}, True, True, [{P0: 10}], id="the-log-started-over"),
        pytest.param({P0: 3, P1: 9}, {P0: 8, P1: 2}, True, True, [{P1: 10}], id="one-of-two"),
    ],
)
async def test_a_restart_is_an_end_before_an_ack_that_the_last_batch_confirms(
    client: InferenceClient,
    acked: dict[tuple[str, int], int],
    ends: dict[tuple[str, int], int],
    past: bool,
    restarted: bool,
    judged: list[dict[tuple[str, int], int]],
) -> None:
    probe = _Probe(past)
    _watching(client, _Ends(ends), probe, acked)

    assert await client._ingest_logs_restarted() is restarted
    positions = [
        {(tp.topic, tp.partition): at for tp, at in asked[1].items()} for asked in probe.asked
    ]
    assert positions == judged, "suspects are judged at one past their acked offset"


async def test_an_ack_that_arrives_while_the_ends_are_asked_for_is_no_suspect(
    client: InferenceClient,
) -> None:
    """Regression: acks read after the ends came back passed them (104 resubmits in 40 s)."""
    probe = _Probe(past=True)
    consumer = _Ends({P0: 10})
    _watching(client, consumer, probe, {P0: 9})
    consumer.meanwhile = lambda: client._restarts.acked(P0, 15)

    assert await client._ingest_logs_restarted() is False
    assert probe.asked == []


def test_acks_after_the_snapshot_do_not_change_it() -> None:
    detector = RestartDetector()
    detector.acked(P0, 4)
    detector.acked(P0, 2)  # acks of concurrent sends come out of order
    snapshot = detector.snapshot()
    detector.acked(P0, 20)  # acked while the ends were being asked for
    assert snapshot == {P0: 4}
    assert restart_suspects(snapshot, {P0: 5}) == {}

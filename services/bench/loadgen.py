"""An outside producer: pre-serialized request events to `inferbus.ingest`, results collected."""

from __future__ import annotations

import asyncio
import base64
import json
import time
import uuid
from collections.abc import Callable, Container, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson
from aiokafka import TopicPartition

from infra.gaps import GapGuard, getmany_in_order
from infra.kafka import make_consumer, make_producer, start_with_retry
from infra.pacing import FetchPacer, lane_waits
from infra.settings import kafka_settings
from infra.tasks import wait_event, within
from schemas.frames import is_frame, join_frame, split_frame
from schemas.topics import RESULTS, Tier, ingest_topic
from services.runtime.publisher import Outgoing, Publisher


@dataclass
class Completed:
    """One result as the load generator saw it."""

    request_id: str
    status: str
    sent_s: float
    received_s: float
    e2e_ms: float | None
    engine_ms: float
    batch_size: int | None
    seq_len: int
    timings: dict[str, float | None] = field(default_factory=dict)
    worker_id: str | None = None
    completed_at: str | None = None
    """The worker's clock when it answered (ISO 8601)."""


@dataclass
class LoadReport:
    """All results of one load phase."""

    sent: int = 0
    completed: list[Completed] = field(default_factory=list)
    started_s: float = 0.0
    ended_s: float = 0.0


REQUEST_ID_SLOT = b"0" * 32
"""Templates carry this where the request id goes; uuid4().hex has the same length, so a
binary frame's envelope length stays right after the swap."""


KEPT_MOST = 1024
"""Most requests whose inputs `EncoderEvents` keeps for the output check."""


class EncoderEvents:
    """Pre-serialized demo-encoder events (a few per length), so the load generator spends
    its CPU on sending, not on encoding: each event is a template with an id slot."""

    def __init__(
        self,
        model: str,
        *,
        seed: int = 1,
        variants: int = 16,
        encoding: str = "frame",
        tier: Tier = "interactive",
        keep_every: int = 0,
    ) -> None:
        """`keep_every`: remember the inputs of every that-many-th request (`kept`), at most
        `KEPT_MOST`, so that their answers can be checked (0: none)."""
        self.model = model
        self.variants = variants
        self.encoding = encoding
        self.tier: Tier = tier
        self.keep_every = keep_every
        self.kept: dict[str, dict[str, np.ndarray[Any, Any]]] = {}
        """Request id -> the inputs it was sent with, for every `keep_every`-th request."""
        self._rng = np.random.default_rng(seed)
        self._templates: dict[int, list[tuple[bytes, dict[str, np.ndarray[Any, Any]]]]] = {}
        self._next = 0

    def __call__(self, request_id: str, seq_len: int) -> bytes:
        templates = self._templates.get(seq_len)
        if templates is None:
            templates = []
            for _ in range(self.variants):
                inputs = encoder_inputs(seq_len, self._rng)
                event = encoder_event(
                    REQUEST_ID_SLOT.decode(),
                    self.model,
                    inputs,
                    encoding=self.encoding,
                    tier=self.tier,
                )
                templates.append((event, inputs))
            self._templates[seq_len] = templates
        self._next += 1
        event, inputs = templates[self._next % self.variants]
        if self.keep_every and self._next % self.keep_every == 0 and len(self.kept) < KEPT_MOST:
            self.kept[request_id] = inputs
        return event.replace(REQUEST_ID_SLOT, request_id.encode())


def _int64_tensor(array: np.ndarray[Any, Any], encoding: str) -> dict[str, Any]:
    tensor: dict[str, Any] = {"dtype": "int64", "shape": list(array.shape)}
    if encoding == "b64":
        tensor["b64"] = base64.b64encode(array.astype("<i8").tobytes()).decode()
    else:
        tensor["data"] = array.tolist()
    return tensor


def encoder_inputs(seq_len: int, rng: np.random.Generator) -> dict[str, np.ndarray[Any, Any]]:
    """One request's token ids (random) and full attention mask, `seq_len` tokens."""
    return {
        "input_ids": rng.integers(5, 1000, size=(1, seq_len)).astype("<i8"),
        "attention_mask": np.ones((1, seq_len), dtype="<i8"),
    }


def encoder_event(
    request_id: str,
    model: str,
    inputs: Mapping[str, np.ndarray[Any, Any]],
    *,
    encoding: str = "frame",
    tier: Tier = "interactive",
) -> bytes:
    """A demo-encoder request of `encoder_inputs`, as any producer would write it.

    `encoding` is the tensor form: `frame` (a binary frame: raw bytes after a JSON envelope,
    the Python client's default), `b64` (JSON, base64 tensors) or `list` (JSON, nested
    lists). Results come back in the same form."""
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    seq_len = ids.shape[1]
    event: dict[str, Any] = {
        "schema_version": 1,
        "request_id": request_id,
        "model": model,
        "tier": tier,
        "timeout_ms": 60_000,
    }
    if encoding == "frame":
        raw = [ids.tobytes(), mask.tobytes()]
        event["inputs"] = {
            "input_ids": {
                "dtype": "int64",
                "shape": [1, seq_len],
                "raw": {"offset": 0, "nbytes": len(raw[0])},
            },
            "attention_mask": {
                "dtype": "int64",
                "shape": [1, seq_len],
                "raw": {"offset": len(raw[0]), "nbytes": len(raw[1])},
            },
        }
        return join_frame(json.dumps(event).encode(), raw)
    event["inputs"] = {
        "input_ids": _int64_tensor(ids, encoding),
        "attention_mask": _int64_tensor(mask, encoding),
    }
    return json.dumps(event).encode()


def read_result(value: bytes) -> dict[str, Any]:
    """A result's JSON document (a binary frame's envelope), without decoding outputs."""
    if is_frame(value):
        envelope, _ = split_frame(value)
        return orjson.loads(envelope)  # type: ignore[no-any-return]
    return orjson.loads(value)  # type: ignore[no-any-return]


def poisson_arrivals(count: int, rate_rps: float, *, seed: int) -> np.ndarray[Any, Any]:
    """Seconds from the start at which `count` Poisson arrivals at `rate_rps` come
    (exponential gaps, seeded), ascending."""
    if rate_rps <= 0:
        raise ValueError(f"an open loop needs a rate above 0, not {rate_rps}")
    gaps = np.random.default_rng(seed).exponential(1.0 / rate_rps, count)
    return np.cumsum(gaps)


class LoadGenerator:
    """Produces events and matches results by request id."""

    def __init__(
        self,
        bootstrap: str,
        make_event: Callable[[str, int], bytes],
        *,
        tier: Tier | None = None,
        keep_results_of: Container[str] | None = None,
    ) -> None:
        """`tier`: send to that tier's ingest topic (None: the shared one, each event naming
        its tier). A critical load's result reader waits as a critical lane and follows no
        rhythm, as the client's does while a critical request is out. `keep_results_of`:
        the request ids whose first result's bytes are kept (`kept_results`), to check."""
        self.bootstrap = bootstrap
        self.make_event = make_event
        self._keep_results_of = keep_results_of
        self.kept_results: dict[str, bytes] = {}
        self._topic = ingest_topic(tier)
        self._producer = make_producer(bootstrap, client_id="inferbus-bench")
        self._publisher = Publisher(self._producer)
        self._sends: set[asyncio.Task[None]] = set()
        self._last_progress = 0.0
        self._consumer = make_consumer(
            bootstrap=bootstrap, group_id=None, client_id="inferbus-bench"
        )
        self._sent: dict[str, tuple[float, int]] = {}
        # Paced like every inferbus reader: the wait grows with the quiet between result
        # bursts, and it never idles while answers are due.
        self._pacer = FetchPacer(
            self._consumer,
            lane_waits(kafka_settings(), critical=tier == "critical"),
            expecting=lambda: bool(self._sent),
            rhythm=tier != "critical",
        )
        self._report = LoadReport()
        self._done = asyncio.Event()
        self._reader: asyncio.Task[None] | None = None
        self._expected = 0
        self.in_flight_changed = asyncio.Event()
        self._answered: set[str] = set()
        self.repeats: dict[str, list[str]] = {}
        """Request id -> the status of every result after its first (at-least-once repeats)."""

    async def start(self) -> None:
        await start_with_retry(self._producer.start, what="bench-producer")
        await start_with_retry(self._consumer.start, what="bench-consumer")
        self._pacer.attach()
        await self._consumer.topics()
        parts = self._consumer.partitions_for_topic(RESULTS) or set()
        tps = [TopicPartition(RESULTS, p) for p in parts]
        self._consumer.assign(tps)
        await self._consumer.seek_to_end(*tps)
        for tp in tps:
            await self._consumer.position(tp)
        self._reader = asyncio.create_task(self._read())

    async def stop(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
        await self._consumer.stop()
        await self._producer.stop()

    async def _read(self) -> None:
        gaps = GapGuard()
        while True:
            batches = await getmany_in_order(self._consumer, gaps, timeout_ms=100)
            self._pacer.observe(sum(len(records) for records in batches.values()))
            now = time.perf_counter()
            for records in batches.values():
                for record in records:
                    result = read_result(record.value)
                    request_id = result["request_id"]
                    sent = self._sent.pop(request_id, None)
                    if sent is None:
                        if request_id in self._answered:
                            self.repeats.setdefault(request_id, []).append(result["status"])
                        continue
                    self._answered.add(request_id)
                    if self._keep_results_of is not None and request_id in self._keep_results_of:
                        self.kept_results[request_id] = record.value
                    t = result.get("timings") or {}
                    engine = sum(
                        t.get(k) or 0.0 for k in ("preprocess_ms", "infer_ms", "postprocess_ms")
                    )
                    self._report.completed.append(
                        Completed(
                            result["request_id"],
                            result["status"],
                            sent[0],
                            now,
                            t.get("e2e_ms"),
                            engine,
                            result.get("batch_size"),
                            sent[1],
                            t,
                            result.get("worker_id"),
                            result.get("completed_at"),
                        )
                    )
                    self.in_flight_changed.set()
            if len(self._report.completed) >= self._expected > 0:
                self._done.set()

    def _send(
        self,
        count: int,
        lengths: Callable[[], int],
        *,
        arrived_at: np.ndarray[Any, Any] | None = None,
    ) -> None:
        """Produce `count` requests in one go (as a high-rate producer batches), acks awaited
        in the background. Latency counts from `arrived_at` (perf_counter seconds, one a
        request) when given, else from now."""
        now = time.perf_counter()
        records = []
        for i in range(count):
            request_id = uuid.uuid4().hex
            seq_len = lengths()
            self._sent[request_id] = (now if arrived_at is None else float(arrived_at[i]), seq_len)
            records.append(
                Outgoing(self._topic, request_id.encode(), self.make_event(request_id, seq_len), [])
            )
        self._report.sent += count
        task = asyncio.create_task(self._acked(records))
        self._sends.add(task)
        task.add_done_callback(self._sends.discard)

    async def _acked(self, records: list[Outgoing]) -> None:
        for ack in await self._publisher.send_all(records):
            if isinstance(ack, BaseException):
                raise ack

    def _tick(self, progress: Callable[[int], None]) -> None:
        now = time.perf_counter()
        if now - self._last_progress >= 1.0:
            self._last_progress = now
            progress(len(self._report.completed))

    async def closed_loop(
        self, count: int, window: int, lengths: Callable[[], int], progress: Callable[[int], None]
    ) -> LoadReport:
        """Keep `window` requests outstanding until `count` are answered (saturation)."""
        self._reset(count)
        while self._report.sent < count:
            outstanding = self._report.sent - len(self._report.completed)
            if outstanding >= window:
                self.in_flight_changed.clear()
                await within(self.in_flight_changed.wait(), 60)
                self._tick(progress)
                continue
            self._send(min(window - outstanding, count - self._report.sent), lengths)
            await asyncio.sleep(0)
        return await self._finish(progress)

    async def open_loop(
        self,
        count: int,
        rate_rps: float,
        lengths: Callable[[], int],
        progress: Callable[[int], None],
        *,
        seed: int = 1,
        linger_s: float | None = None,
    ) -> LoadReport:
        """Send `count` requests at `rate_rps` regardless of answers, as Poisson arrivals
        (`poisson_arrivals`; the peers' load generator draws the same). Like a Kafka producer
        with a linger, an arrival waits up to `linger_s` (default: the producers'
        `linger_ms`) for the ones after it and they go as one batch: one produce batch per
        arrival would measure the broker's per-batch cost, not inferbus. Each request's
        latency counts from its arrival, not its send, so time the generator itself falls
        behind is counted too."""
        if linger_s is None:
            linger_s = kafka_settings().linger_ms / 1000
        self._reset(count)
        arrivals = poisson_arrivals(count, rate_rps, seed=seed)
        start = time.perf_counter()
        while self._report.sent < count:
            elapsed = time.perf_counter() - start
            due = int(np.searchsorted(arrivals, elapsed, side="right"))
            sent = self._report.sent
            if due > sent:
                self._send(due - sent, lengths, arrived_at=start + arrivals[sent:due])
                self._tick(progress)
            if self._report.sent < count:
                next_send = arrivals[self._report.sent] + linger_s
                await asyncio.sleep(max(next_send - elapsed, 0.0))
        return await self._finish(progress)

    def _reset(self, count: int) -> None:
        self._report = LoadReport(started_s=time.perf_counter())
        self._expected = count
        self._done.clear()

    async def _finish(self, progress: Callable[[int], None]) -> LoadReport:
        if self._sends:
            await asyncio.gather(*self._sends)
        deadline = time.perf_counter() + 120
        while not self._done.is_set() and time.perf_counter() < deadline:
            if not await wait_event(self._done, 1.0):
                progress(len(self._report.completed))
        self._report.ended_s = time.perf_counter()
        return self._report

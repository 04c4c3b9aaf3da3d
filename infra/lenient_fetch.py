"""Fetched records that aiokafka's reader refuses, read anyway.

Kafka's protocol says a header key is UTF-8, but brokers do not check it, and Go and C
clients (franz-go, sarama, librdkafka) write a header name as raw bytes. aiokafka decodes
every header key while it reads a fetch, so one record with a key that is not UTF-8 made
every poll of its partition raise: the records before it in that poll were skipped (the
position had passed them), and nothing after it was read again, ever (seen live: an
ingest partition stopped for good, the error logged once a second with no partition or
offset named).

`install` gives aiokafka's fetcher a record reader that falls back to this module's own
reading of the fetched bytes when aiokafka's refuses them: a header key that is not UTF-8
is read with U+FFFD in place of its bad bytes (as Java's clients read it), and the record
goes on to be answered like any other. What this reading cannot make sense of either (a
batch whose checksum fails, a record whose structure does not hold) comes out as one
unreadable mark (`UNREADABLE_HEADER`, no key or value) for the offsets it loses, so its
reader dead-letters it instead of stopping there.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from aiokafka.codec import gzip_decode, lz4_decode, snappy_decode, zstd_decode
from aiokafka.consumer import fetcher as aiokafka_fetcher
from aiokafka.record.memory_records import MemoryRecords
from aiokafka.record.util import calc_crc32c, decode_varint
from aiokafka.structs import TopicPartition

log = logging.getLogger(__name__)

UNREADABLE_HEADER = "inferbus-unreadable"
"""The header of an unreadable mark: what was lost, and why (UTF-8)."""

_BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
"""A v2 record batch's header, from its base offset to its record count (61 bytes)."""
_CRC_FROM = 21
"""A batch's checksum covers its bytes from its attributes on."""
_CODEC_MASK, _LOG_APPEND_TIME, _CONTROL = 0x07, 0x08, 0x20
_DECOMPRESS = {1: gzip_decode, 2: snappy_decode, 3: lz4_decode, 4: zstd_decode}


@dataclass(frozen=True, slots=True)
class LenientRecord:
    """A record as aiokafka's `ConsumerRecord` is built from one."""

    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    checksum: None = None


@dataclass(frozen=True, slots=True)
class LenientBatch:
    """A v2 record batch: its records, or why they could not be read."""

    base_offset: int
    next_offset: int
    is_control: bool
    records: list[LenientRecord]
    unreadable_from: int | None = None
    """The first offset left unread, when the records stopped making sense there."""
    error: str = ""


def read_batches(data: bytes, *, check_crcs: bool = True) -> Iterator[LenientBatch]:
    """The v2 record batches in a fetched partition's bytes, each read as far as it makes
    sense (none of a batch whose checksum fails). Raises ValueError for a batch of the
    legacy formats (magic 0 and 1), which no header can be in."""
    view = memoryview(data)
    pos = 0
    while len(view) - pos >= _BATCH_HEADER.size:
        fields = _BATCH_HEADER.unpack_from(view, pos)
        base_offset, length, _epoch, magic, crc, attributes, last_delta = fields[:7]
        first_ts, max_ts, count = fields[7], fields[8], fields[12]
        end = pos + 12 + length
        if end > len(view):
            return  # a partial batch at the fetch's end: the broker cut it at the size asked
        if magic != 2:
            raise ValueError(f"record batch of magic {magic}: only v2 (magic 2) is read here")
        if check_crcs and calc_crc32c(bytes(view[pos + _CRC_FROM : end])) != crc:
            yield LenientBatch(
                base_offset,
                base_offset + last_delta + 1,
                is_control=False,
                records=[],
                unreadable_from=base_offset,
                error="the batch's checksum does not match its bytes",
            )
            pos = end
            continue
        body = bytes(view[pos + _BATCH_HEADER.size : end])
        pos = end
        stamp = max_ts if attributes & _LOG_APPEND_TIME else None
        records: list[LenientRecord] = []
        unreadable_from, error = None, ""
        try:
            body = _decompressed(body, attributes & _CODEC_MASK)
            for record in _read_records(body, count, base_offset, first_ts, stamp):
                records.append(record)
        except Exception as exc:  # what these bytes make any reader raise: the mark says it
            unreadable_from = records[-1].offset + 1 if records else base_offset
            error = f"{type(exc).__name__}: {exc}"
        yield LenientBatch(
            base_offset,
            base_offset + last_delta + 1,
            bool(attributes & _CONTROL),
            records,
            unreadable_from,
            error,
        )


def _decompressed(body: bytes, codec: int) -> bytes:
    """A batch's records as bytes; ValueError for a codec Kafka does not have."""
    if not codec:
        return body
    if codec not in _DECOMPRESS:
        raise ValueError(f"compression codec {codec} is not one Kafka has")
    try:
        return bytes(_DECOMPRESS[codec](body))
    except NotImplementedError as exc:  # aiokafka without cramjam: say what to install
        raise ValueError(f"{exc} (install aiokafka[snappy,lz4,zstd]: it brings cramjam)") from exc


def _read_records(
    body: bytes, count: int, base_offset: int, first_ts: int, log_append_ts: int | None
) -> Iterator[LenientRecord]:
    pos = 0
    for _ in range(count):
        length, pos = decode_varint(body, pos)
        end = pos + length
        if length < 0 or end > len(body):
            raise ValueError(f"a record of {length} bytes where {len(body) - pos} are left")
        pos += 1  # the record's attributes: unused
        ts_delta, pos = decode_varint(body, pos)
        offset_delta, pos = decode_varint(body, pos)
        key, pos = _sized_bytes(body, pos)
        value, pos = _sized_bytes(body, pos)
        header_count, pos = decode_varint(body, pos)
        headers: list[tuple[str, bytes | None]] = []
        for _ in range(header_count):
            name, pos = _sized_bytes(body, pos)
            header_value, pos = _sized_bytes(body, pos)
            headers.append(((name or b"").decode("utf-8", "replace"), header_value))
        if pos != end:
            raise ValueError(f"a record's fields end at byte {pos}, its length says {end}")
        yield LenientRecord(
            offset=base_offset + offset_delta,
            timestamp=first_ts + ts_delta if log_append_ts is None else log_append_ts,
            timestamp_type=0 if log_append_ts is None else 1,
            key=key,
            value=value,
            headers=headers,
        )


def _sized_bytes(body: bytes, pos: int) -> tuple[bytes | None, int]:
    size, pos = decode_varint(body, pos)
    if size < 0:
        return None, pos
    if pos + size > len(body):
        raise ValueError(f"a field of {size} bytes where {len(body) - pos} are left")
    return body[pos : pos + size], pos + size


class _KeptBytes:
    """aiokafka's `MemoryRecords`, keeping the fetched bytes for `_LenientPartitionRecords`."""

    __slots__ = ("_records", "raw")

    def __init__(self, raw: bytes) -> None:
        self.raw = raw
        self._records = MemoryRecords(raw)

    def has_next(self) -> bool:
        return bool(self._records.has_next())

    def next_batch(self) -> Any:
        return self._records.next_batch()

    def size_in_bytes(self) -> int:
        return int(self._records.size_in_bytes())


class _LenientPartitionRecords(aiokafka_fetcher.PartitionRecords):  # type: ignore[misc]
    """aiokafka's reader of one partition's fetch; this module's reading where it fails."""

    def _unpack_records(self) -> Iterator[Any]:
        try:
            yield from super()._unpack_records()
        except Exception as exc:
            raw = getattr(self._records, "raw", None)
            if raw is None or self._isolation_level != aiokafka_fetcher.READ_UNCOMMITTED:
                raise
            log.warning(
                "event=record_read_leniently topic=%s partition=%d offset=%d error=%r",
                self._tp.topic,
                self._tp.partition,
                self.next_fetch_offset,
                exc,
            )
            yield from self._read_leniently(raw)

    def _read_leniently(self, raw: bytes) -> Iterator[Any]:
        tp: TopicPartition = self._tp
        for batch in read_batches(raw, check_crcs=self._check_crcs):
            position: int = self.next_fetch_offset  # type: ignore[has-type]
            if batch.next_offset <= position:
                continue
            if not batch.is_control:
                for record in batch.records:
                    if record.offset >= position:
                        position = self.next_fetch_offset = record.offset + 1
                        yield self._consumer_record(tp, record)
                if batch.unreadable_from is not None:
                    yield self._consumer_record(tp, _unreadable_mark(tp, batch))
            self.next_fetch_offset = batch.next_offset


def _unreadable_mark(tp: TopicPartition, batch: LenientBatch) -> LenientRecord:
    first, last = batch.unreadable_from, batch.next_offset - 1
    reason = f"records {first}-{last} of {tp.topic}[{tp.partition}] cannot be read: {batch.error}"
    log.error("event=records_unreadable topic=%s partition=%d %s", tp.topic, tp.partition, reason)
    return LenientRecord(
        offset=last,
        timestamp=-1,
        timestamp_type=0,
        key=None,
        value=None,
        headers=[(UNREADABLE_HEADER, reason.encode())],
    )


def unreadable_reason(headers: Any) -> str | None:
    """What an unreadable mark says was lost (None: the record is not one)."""
    for name, value in headers or ():
        if name == UNREADABLE_HEADER:
            return bytes(value or b"").decode("utf-8", "replace")
    return None


def install() -> None:
    """Give aiokafka's fetcher this module's reader (idempotent). If aiokafka no longer has
    the names it replaces, say so once and leave aiokafka as it is."""
    if aiokafka_fetcher.PartitionRecords is _LenientPartitionRecords:
        return
    if not hasattr(aiokafka_fetcher, "MemoryRecords") or not hasattr(
        aiokafka_fetcher.PartitionRecords, "_consumer_record"
    ):
        log.warning("event=lenient_fetch_unavailable reason=aiokafka_fetcher_changed")
        return
    aiokafka_fetcher.MemoryRecords = _KeptBytes
    aiokafka_fetcher.PartitionRecords = _LenientPartitionRecords

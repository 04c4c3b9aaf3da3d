"""Records aiokafka's reader refuses are read anyway (`infra.lenient_fetch`)."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from aiokafka.consumer import fetcher as aiokafka_fetcher
from aiokafka.record.default_records import _DefaultRecordBatchBuilderPy
from aiokafka.record.memory_records import MemoryRecords
from aiokafka.structs import TopicPartition

from infra import lenient_fetch
from infra.lenient_fetch import read_batches, unreadable_reason

TP = TopicPartition("inferbus.ingest.interactive", 0)
BAD_KEY = b"\xff\xfebad-key"


class RawHeaderName(str):
    """A header name whose bytes are not UTF-8, as Go and C clients can write one."""

    raw: bytes

    def __new__(cls, raw: bytes) -> RawHeaderName:
        name = super().__new__(cls, "x")
        name.raw = raw
        return name

    def encode(self, *_: Any, **__: Any) -> bytes:
        return self.raw


def batch(
    records: list[tuple[bytes, Headers]],
    *,
    base_offset: int = 0,
    compression: int = 0,
) -> bytes:
    """One v2 batch of `(value, headers)` records, the first at `base_offset`."""
    builder = _DefaultRecordBatchBuilderPy(
        magic=2,
        compression_type=compression,
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for delta, (value, headers) in enumerate(records):
        builder.append(delta, timestamp=1_000 + delta, key=b"k", value=value, headers=headers)
    data = bytearray(builder.build())
    data[0:8] = struct.pack(">q", base_offset)
    # The builder keeps a batch uncompressed when compressing does not make it smaller.
    assert struct.unpack_from(">h", data, 21)[0] & 0x07 == compression, "not compressed"
    return bytes(data)


Headers = list[tuple[str, bytes]]
POISONED: list[tuple[bytes, Headers]] = [
    (b"before", []),
    (b"poison", [(RawHeaderName(BAD_KEY), b"v")]),
    (b"after", [("traceparent", b"00-x")]),
]


ALL = [b"before", b"poison", b"after"]
LONG = [(value * 100, headers) for value, headers in POISONED]
"""POISONED with values long enough that compressing them pays."""
ALL_LONG = [value * 100 for value in ALL]
READ_BAD_KEY = [("\ufffd\ufffdbad-key", b"v")]
TRACE = [("traceparent", b"00-x")]


@pytest.mark.parametrize(
    ("data", "values", "headers_of_second"),
    [
        pytest.param(batch(POISONED), ALL, READ_BAD_KEY, id="bad-header-key"),
        pytest.param(batch(LONG, compression=1), ALL_LONG, READ_BAD_KEY, id="gzip"),
        pytest.param(batch(LONG, compression=2), ALL_LONG, READ_BAD_KEY, id="snappy"),
        pytest.param(batch(LONG, compression=3), ALL_LONG, READ_BAD_KEY, id="lz4"),
        pytest.param(batch(LONG, compression=4), ALL_LONG, READ_BAD_KEY, id="zstd"),
        pytest.param(
            batch(POISONED[:1]) + batch(POISONED[2:], base_offset=1),
            [b"before", b"after"],
            TRACE,
            id="two-batches",
        ),
        pytest.param(
            batch(POISONED) + batch(POISONED[2:], base_offset=3)[:40],
            ALL,
            READ_BAD_KEY,
            id="a-partial-batch-at-the-end",
        ),
    ],
)
def test_read_batches(
    data: bytes, values: list[bytes], headers_of_second: list[tuple[str, bytes]]
) -> None:
    records = [record for read in read_batches(data) for record in read.records]

    assert [record.value for record in records] == values
    assert [record.offset for record in records] == list(range(len(values)))
    assert records[1].headers == headers_of_second
    assert records[0].timestamp == 1_000
    assert all(read.unreadable_from is None for read in read_batches(data))


def test_a_record_whose_structure_is_broken_leaves_the_rest_of_its_batch_unread() -> None:
    data = bytearray(batch(POISONED))
    first_record = 61  # after the batch header
    data[first_record] = 0x7E  # the first record's length: 63 bytes, past its fields

    (read,) = read_batches(bytes(data), check_crcs=False)

    assert read.records == []
    assert (read.unreadable_from, read.next_offset) == (0, 3)
    assert "ValueError" in read.error


def records_of(data: bytes, *, lenient: bool, check_crcs: bool = True) -> list[Any]:
    kind = lenient_fetch._LenientPartitionRecords if lenient else aiokafka_fetcher.PartitionRecords
    records = lenient_fetch._KeptBytes(data) if lenient else MemoryRecords(data)
    return list(kind(TP, records, [], 0, None, None, check_crcs, aiokafka_fetcher.READ_UNCOMMITTED))


def test_aiokafka_alone_refuses_a_header_key_that_is_not_utf8() -> None:
    with pytest.raises(UnicodeDecodeError):
        records_of(batch(POISONED), lenient=False)


def test_every_record_around_a_bad_header_key_is_handed_out_once() -> None:
    data = batch(POISONED) + batch([(b"next", [])], base_offset=3)

    records = records_of(data, lenient=True)

    assert [(r.offset, r.value) for r in records] == [
        (0, b"before"),
        (1, b"poison"),
        (2, b"after"),
        (3, b"next"),
    ]
    assert records[1].topic == TP.topic
    assert all(unreadable_reason(r.headers) is None for r in records)


def test_a_broken_record_comes_out_as_one_unreadable_mark_past_which_reading_goes_on() -> None:
    broken = bytearray(batch(POISONED))
    broken[61] = 0x7E
    data = bytes(broken) + batch([(b"next", [])], base_offset=3)

    records = records_of(data, lenient=True, check_crcs=False)

    assert [(r.offset, r.value) for r in records] == [(2, None), (3, b"next")]
    reason = unreadable_reason(records[0].headers)
    assert reason is not None
    assert reason.startswith(f"records 0-2 of {TP.topic}[0] cannot be read: ValueError")


def test_install_gives_aiokafkas_fetcher_the_lenient_reader() -> None:
    lenient_fetch.install()
    lenient_fetch.install()

    assert aiokafka_fetcher.PartitionRecords is lenient_fetch._LenientPartitionRecords
    assert aiokafka_fetcher.MemoryRecords is lenient_fetch._KeptBytes


def test_a_batch_whose_checksum_fails_comes_out_as_one_unreadable_mark() -> None:
    """aiokafka raises for it at every fetch, as for a bad header key."""
    corrupt = bytearray(batch(POISONED))
    corrupt[-3] ^= 0xFF  # a byte of the last record's header value
    data = bytes(corrupt) + batch([(b"next", [])], base_offset=3)

    records = records_of(data, lenient=True)

    assert [(r.offset, r.value) for r in records] == [(2, None), (3, b"next")]
    reason = unreadable_reason(records[0].headers)
    assert reason is not None and "checksum" in reason


@pytest.mark.parametrize(
    ("codec", "words"),
    [(1, "not a gzipped file"), (6, "codec 6 is not one kafka has")],
    ids=["bad-gzip", "unknown-codec"],
)
def test_a_batch_whose_records_cannot_be_decompressed_is_one_unreadable_mark(
    codec: int, words: str
) -> None:
    data = bytearray(batch(POISONED))
    attributes = struct.unpack_from(">h", data, 21)[0]
    struct.pack_into(">h", data, 21, attributes | codec)  # said compressed; it is not

    (read,) = read_batches(bytes(data), check_crcs=False)

    assert read.records == []
    assert (read.unreadable_from, read.next_offset) == (0, 3)
    assert words in read.error.lower()


def test_a_codec_this_install_lacks_is_named_with_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without cramjam aiokafka reads no snappy, lz4 or zstd batch: the mark says why."""
    data = batch(LONG, compression=3)

    def missing(_: bytes) -> bytes:
        raise NotImplementedError("LZ4 codec is not available")

    monkeypatch.setitem(lenient_fetch._DECOMPRESS, 3, missing)
    (read,) = read_batches(data)

    assert read.records == []
    assert "LZ4 codec is not available" in read.error
    assert "aiokafka[snappy,lz4,zstd]" in read.error

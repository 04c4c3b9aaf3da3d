"""Records the fetch could not read (`infra.lenient_fetch`) go to the DLQ with what was lost."""

from __future__ import annotations

from pathlib import Path

from aiokafka.structs import ConsumerRecord

from infra.lenient_fetch import UNREADABLE_HEADER
from schemas import headers as h
from schemas.topics import DLQ, INGEST
from tests.unit.ingest.test_undeliverable import FailingPublisher, service


async def test_an_unreadable_mark_is_dead_lettered_with_what_was_lost(tmp_path: Path) -> None:
    lost = b"records 5-7 of inferbus.ingest[0] cannot be read: the batch's checksum does not match"
    mark = ConsumerRecord(
        INGEST, 0, 7, -1, 0, None, None, None, -1, -1, ((UNREADABLE_HEADER, lost),)
    )
    publisher = FailingPublisher(())
    ingest = service(tmp_path, publisher)

    await ingest.handle([mark])

    [sent] = publisher.sent
    assert sent.topic == DLQ
    assert h.header(sent.headers, h.ERROR_CODE) == "unparseable"
    assert h.header(sent.headers, h.ERROR_MESSAGE) == lost.decode()
    assert h.header(sent.headers, h.SOURCE_OFFSET) == "7"
    assert ingest.offsets.committable() == {(INGEST, 0): 8}

"""An offset reader whose start fails leaves no consumer open (`up` printed "Unclosed
AIOKafkaConsumer" after a broker refused its security settings)."""

from __future__ import annotations

from typing import Any

import pytest
from aiokafka.errors import KafkaConnectionError

import infra.kafka
from scaler.collector.offsets import GroupOffsetReader


async def test_a_failed_start_stops_its_consumer(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[Any] = []
    make = infra.kafka.make_consumer

    def recording(**options: Any) -> Any:
        built.append(make(**options))
        return built[-1]

    monkeypatch.setattr(infra.kafka, "make_consumer", recording)
    reader = GroupOffsetReader("127.0.0.1:1", "g", "t", timeout_s=1.0)  # nothing listens
    with pytest.raises(KafkaConnectionError):
        await reader.start()
    [consumer] = built
    assert consumer._closed, "the consumer of the failed start was left open"
    await reader.close()  # nothing to close: idempotent

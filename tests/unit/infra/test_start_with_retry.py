"""A client's start is retried while the broker comes up (refusals, at once), not through
tries that each wait out aiokafka's request timeout."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka.errors import KafkaConnectionError

from infra.kafka import start_with_retry


class Start:
    """Fails `failures` times, each after `takes_s`, then starts."""

    def __init__(self, failures: int, takes_s: float) -> None:
        self.failures = failures
        self.takes_s = takes_s
        self.tries = 0

    async def __call__(self) -> str:
        self.tries += 1
        await asyncio.sleep(self.takes_s)
        if self.tries <= self.failures:
            raise KafkaConnectionError("Unable to bootstrap from [('127.0.0.1', 19092)]")
        return "started"


@pytest.mark.parametrize(
    ("failures", "takes_s", "tries", "starts"),
    [
        pytest.param(3, 0.0, 4, True, id="refused-while-coming-up-then-started"),
        pytest.param(100, 0.0, 5, False, id="refused-every-time-gives-up-after-attempts"),
        pytest.param(100, 0.2, 1, False, id="a-try-that-outlasts-the-window-is-not-repeated"),
    ],
)
async def test_start_with_retry(failures: int, takes_s: float, tries: int, starts: bool) -> None:
    start = Start(failures, takes_s)

    if starts:
        assert await start_with_retry(start, what="t", attempts=5, delay_s=0.01) == "started"
    else:
        with pytest.raises(KafkaConnectionError):
            await start_with_retry(start, what="t", attempts=5, delay_s=0.01)

    assert start.tries == tries

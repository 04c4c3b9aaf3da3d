"""The result reader across a broker that lost its logs, and Ctrl-C as a stop, not an exit."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Mapping
from types import FrameType

import pytest
from aiokafka import TopicPartition

from infra.log_end import EndVerdict
from services.load.results import ResultReader
from services.load.sigint import first_sigint_calls

T = "inferbus.results"
P0, P1 = TopicPartition(T, 0), TopicPartition(T, 1)


class FakeConsumer:
    """Ends and positions as a broker would answer them; records the seeks."""

    def __init__(self, ends: dict[TopicPartition, int], positions: dict[TopicPartition, int]):
        self.ends, self.positions = ends, positions
        self.seeks: dict[TopicPartition, int] = {}

    def assignment(self) -> set[TopicPartition]:
        return set(self.positions)

    async def end_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self.ends[tp] for tp in tps}

    async def position(self, tp: TopicPartition) -> int:
        return self.positions[tp]

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.seeks[tp] = offset


class FakeProbe:
    """Says a suspect is past its log when its end is below `true_end` (Tansu's short end
    of a last batch of several records is not)."""

    def __init__(self, true_ends: dict[TopicPartition, int]) -> None:
        self.true_ends = true_ends
        self.asked: list[dict[TopicPartition, int]] = []

    async def judge(
        self, suspects: Mapping[TopicPartition, int], positions: Mapping[TopicPartition, int]
    ) -> EndVerdict:
        self.asked.append(dict(suspects))
        return EndVerdict(past=[tp for tp in suspects if positions[tp] > self.true_ends[tp]])


@pytest.mark.parametrize(
    ("ends", "positions", "true_ends", "reread", "asked"),
    [
        ({P0: 40, P1: 41}, {P0: 40, P1: 41}, {P0: 40, P1: 41}, [], False),
        ({P0: 3, P1: 0}, {P0: 40, P1: 41}, {P0: 3, P1: 0}, [P0, P1], True),
        ({P0: 3, P1: 41}, {P0: 40, P1: 41}, {P0: 3, P1: 41}, [P0], True),
        ({P0: 39, P1: 41}, {P0: 40, P1: 41}, {P0: 42, P1: 41}, [], True),
    ],
    ids=["at-the-end", "both-restarted", "one-restarted", "inside-the-last-batch"],
)
async def test_a_restarted_reply_log_is_read_from_its_start(
    ends: dict[TopicPartition, int],
    positions: dict[TopicPartition, int],
    true_ends: dict[TopicPartition, int],
    reread: list[TopicPartition],
    asked: bool,
) -> None:
    """A run once counted 288 answered requests lost: they were on the new broker's log,
    which ended before the reader's position, and nothing read them."""
    consumer, probe = FakeConsumer(ends, positions), FakeProbe(true_ends)
    reader = ResultReader(consumer, probe, lambda _: None)
    assert await reader.rewind_restarted() == reread
    assert consumer.seeks == dict.fromkeys(reread, 0)
    assert reader.restarts == (1 if reread else 0)
    assert bool(probe.asked) is asked


async def test_a_broker_that_is_away_is_asked_again_later() -> None:
    class Away(FakeConsumer):
        async def end_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
            raise TimeoutError

    reader = ResultReader(Away({}, {P0: 40}), FakeProbe({}), lambda _: None)
    assert await reader.rewind_restarted() == []
    assert reader.restarts == 0


async def test_the_first_ctrl_c_calls_back_and_the_second_goes_to_the_old_handler() -> None:
    before: list[int] = []

    def old_handler(signum: int, frame: FrameType | None) -> None:
        before.append(signum)

    saved = signal.signal(signal.SIGINT, old_handler)
    stops: list[str] = []
    try:
        with first_sigint_calls(lambda: stops.append("stop")) as installed:
            assert installed
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(50):
                if stops:
                    break
                await asyncio.sleep(0.01)
            assert stops == ["stop"] and before == []
            os.kill(os.getpid(), signal.SIGINT)  # the old handler again
            await asyncio.sleep(0.05)
            assert before == [signal.SIGINT] and stops == ["stop"]
        assert signal.getsignal(signal.SIGINT) is old_handler
    finally:
        signal.signal(signal.SIGINT, saved)


async def test_off_the_main_thread_ctrl_c_is_left_alone() -> None:
    def in_thread() -> bool:
        async def probe() -> bool:
            with first_sigint_calls(lambda: None) as installed:
                return installed

        return asyncio.run(probe())

    assert await asyncio.to_thread(in_thread) is False

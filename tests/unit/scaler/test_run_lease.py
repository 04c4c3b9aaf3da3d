"""`inferbus scaler run` with a lease: a lost lease cuts the tick in progress at once (the
next holder may act soon), where a stop gives it its limit (`scaler/run.py`)."""

from __future__ import annotations

import asyncio
import logging
import time
from types import SimpleNamespace
from typing import Any

import pytest

from scaler import run as scaler_run


class SlowTicks:
    """A service whose tick in progress waits on a broker that is away."""

    def __init__(self) -> None:
        self.collector = SimpleNamespace(groups=["inferbus.workers.m.interactive"])
        self.actuator = SimpleNamespace()  # not the local one: nothing to hand over
        self.registry = SimpleNamespace(table=None)
        self.closed = False
        self.cancelled = False

    async def start(self) -> None:
        return None

    async def run(self, stop: asyncio.Event) -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            self.cancelled = True
            raise

    async def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize("cause", ["lost", "stop"])
async def test_a_lost_lease_cuts_the_tick_where_a_stop_gives_it_its_limit(
    cause: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(scaler_run, "STOP_LIMIT_S", 0.6)
    service, stop = SlowTicks(), asyncio.Event()
    lease = SimpleNamespace(lost=asyncio.Event())
    asyncio.get_running_loop().call_later(0.05, (lease.lost if cause == "lost" else stop).set)
    started = time.monotonic()
    with caplog.at_level(logging.INFO):
        act: Any = scaler_run._act
        await asyncio.wait_for(act(service, stop, lease, "local", "slo"), 5.0)
    took = time.monotonic() - started
    assert service.cancelled and service.closed
    if cause == "lost":
        assert took < 0.4  # cut at once, not given STOP_LIMIT_S
        assert "event=scaler_stopped gave_up=nothing" in caplog.text
    else:
        assert took >= 0.6
        assert "step=tick_in_progress after_s=0.6" in caplog.text


@pytest.mark.parametrize(
    ("value", "ok"),
    [("0", True), ("2", True), ("10", True), ("1.5", False), ("-1", False), ("nan", False)],
)
def test_a_lease_is_none_or_long_enough_to_renew(
    value: str, ok: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pydantic import ValidationError

    from scaler.settings import ScalerSettings

    monkeypatch.setenv("INFERBUS_SCALER_LEASE_S", value)
    if ok:
        assert ScalerSettings().lease_s == float(value)
    else:
        with pytest.raises(ValidationError, match="lease_s"):
            ScalerSettings()


async def test_a_lease_lost_while_a_stop_waits_on_the_tick_cuts_it(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """SIGTERM first gives the tick its time; the lease lost meanwhile ends it at once."""
    monkeypatch.setattr(scaler_run, "STOP_LIMIT_S", 5.0)
    service, stop = SlowTicks(), asyncio.Event()
    lease = SimpleNamespace(lost=asyncio.Event())
    loop = asyncio.get_running_loop()
    loop.call_later(0.05, stop.set)
    loop.call_later(0.3, lease.lost.set)
    started = time.monotonic()
    with caplog.at_level(logging.INFO):
        act: Any = scaler_run._act
        await asyncio.wait_for(act(service, stop, lease, "local", "slo"), 5.0)
    assert 0.3 <= time.monotonic() - started < 1.0
    assert service.cancelled and service.closed
    assert "event=tick_cut" in caplog.text


@pytest.mark.parametrize(
    ("cause", "workers", "hands_over"),
    [
        pytest.param("stop", {"g": frozenset({"w1"})}, True, id="clean-stop-own-workers"),
        pytest.param("stop", {}, False, id="clean-stop-workers-that-outlive-it"),
        pytest.param("lost", {"g": frozenset({"w1"})}, False, id="lease-lost"),
    ],
)
async def test_a_clean_stop_hands_its_own_workers_over_before_it_closes(
    cause: str,
    workers: dict[str, frozenset[str]],
    hands_over: bool,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    service, stop = SlowTicks(), asyncio.Event()
    lease = SimpleNamespace(lost=asyncio.Event())
    calls: list[tuple[object, object, bool]] = []

    async def handing(lease_: object, ours: object, table: Any) -> None:
        table()  # the registry as it is then
        calls.append((lease_, ours, service.closed))
        await asyncio.sleep(0.4)  # longer than the stop's limit: the handover has its own

    monkeypatch.setattr(scaler_run, "own_workers", lambda actuator: workers)
    monkeypatch.setattr(scaler_run, "hand_over", handing)
    monkeypatch.setattr(scaler_run, "STOP_LIMIT_S", 0.2)
    asyncio.get_running_loop().call_later(0.05, (lease.lost if cause == "lost" else stop).set)
    act: Any = scaler_run._act
    with caplog.at_level(logging.INFO):
        await asyncio.wait_for(act(service, stop, lease, "local", "slo"), 5.0)
    assert calls == ([(lease, workers, False)] if hands_over else [])
    assert service.closed
    if hands_over:
        # The tick's cut is kept, and the disconnect still had its own time after the wait.
        assert "step=disconnect" not in caplog.text
        assert 'gave_up=["the rest of this tick' in caplog.text


class FakeLease:
    """Held at the first `acquire` and lost soon after; the second waits until the stop."""

    def __init__(self, stop: asyncio.Event, acting: list[float | None]) -> None:
        self.lost = asyncio.Event()
        self.view = SimpleNamespace(holder=None)
        self.acquired = 0
        self.released = False
        self._stop, self._acting = stop, acting

    async def start(self) -> None:
        return None

    async def acquire(self, stop: asyncio.Event) -> bool:
        self.acquired += 1
        if self.acquired == 1:
            loop = asyncio.get_running_loop()
            loop.call_later(0.2, lambda: self._acting.append(_acting_now()))
            loop.call_later(0.3, self.lost.set)
            return True
        self._acting.append(_acting_now())
        self._stop.set()
        return False

    async def release(self) -> None:
        self.released = True

    async def close(self) -> None:
        return None


def _acting_now() -> float | None:
    from tracing.metrics import REGISTRY

    return REGISTRY.get_sample_value("inferbus_scaler_acting")


async def test_a_scaler_that_loses_the_lease_stands_down_and_waits_to_take_it_again(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    from scaler.settings import ScalerSettings

    stop = asyncio.Event()
    acting: list[float | None] = []
    lease = FakeLease(stop, acting)
    services: list[SlowTicks] = []
    closed: list[bool] = []

    def new_service(*args: Any, **kwargs: Any) -> SlowTicks:
        service = SlowTicks()
        service.actuator = SimpleNamespace(close=lambda: _closed(closed))  # type: ignore[attr-defined]
        services.append(service)
        return service

    monkeypatch.setattr(scaler_run, "LeaseKeeper", lambda *a, **k: lease)
    monkeypatch.setattr(scaler_run, "ScalerService", new_service)
    monkeypatch.setattr(scaler_run, "make_actuator", lambda *a, **k: None)
    monkeypatch.setattr(scaler_run, "init_tracing", lambda *a, **k: None)
    monkeypatch.setattr(scaler_run, "start_metrics_server", lambda *a, **k: None)
    monkeypatch.setattr(scaler_run, "shutdown_tracing", lambda *a, **k: None)
    settings = ScalerSettings(actuator="local", lease_s=4.0)
    with caplog.at_level(logging.INFO):
        await asyncio.wait_for(scaler_run.run_scaler("127.0.0.1:1", tmp_path, settings), 5.0)
    assert lease.acquired == 2  # stood down, then waited to take it again
    assert acting == [1.0, 0.0]  # acting while it held the lease, not while it waited
    assert len(services) == 1 and services[0].cancelled and services[0].closed
    assert closed == [True]  # the term's actuator closed (a local one stops its workers)
    assert "event=scaler_stood_down" in caplog.text
    assert lease.released


async def _closed(closed: list[bool]) -> None:
    closed.append(True)

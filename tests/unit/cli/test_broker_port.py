"""Which port `inferbus broker` asks the embedded broker for."""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

import infra.broker
from services.cli.main import app


class Refused(Exception):
    """The fake broker's way to end the command once it has the port."""


class FakeBroker(infra.broker.EmbeddedBroker):
    """The real broker's choice of port, then no broker."""

    ports: list[int] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        FakeBroker.ports.append(self._wanted_port)
        raise Refused


@pytest.mark.parametrize(
    ("env", "args", "port"),
    [
        pytest.param({}, [], 9092, id="default"),
        pytest.param({"INFERBUS_BROKER_PORT": "19092"}, [], 19092, id="from-the-environment"),
        pytest.param({"INFERBUS_BROKER_PORT": "19092"}, ["--port", "29092"], 29092, id="flag"),
    ],
)
def test_the_broker_port_comes_from_the_flag_else_the_environment(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], args: list[str], port: int
) -> None:
    """Regression: the flag's own default (9092) always won, so INFERBUS_BROKER_PORT did
    nothing."""
    monkeypatch.setattr(infra.broker, "EmbeddedBroker", FakeBroker)
    FakeBroker.ports = []
    for name, value in env.items():
        monkeypatch.setenv(name, value)

    result = CliRunner().invoke(app, ["broker", *args])

    assert isinstance(result.exception, Refused)
    assert FakeBroker.ports == [port]

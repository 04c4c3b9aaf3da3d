"""Shared fixtures: a real broker for integration tests (Tansu here, Kafka where Docker runs)."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from infra.broker import EmbeddedBroker
from infra.lograte import RateLimitFilter


def _docker_available() -> bool:
    if os.environ.get("INFERBUS_TEST_BROKER", "") == "tansu" or shutil.which("docker") is None:
        return False
    try:
        result = subprocess.run(["docker", "info"], capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return result.returncode == 0


@pytest.fixture(scope="session", autouse=True)
def _ctrl_c_reaches_the_tests() -> Iterator[None]:
    """A shell without job control starts a background command (`make test &`, a CI step
    run that way) with SIGINT ignored, and Python then installs no KeyboardInterrupt for it:
    the tests that send themselves Ctrl-C would wait for ever. They test what a terminal's
    Ctrl-C does, so they get Python's own handler back for the session."""
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        yield
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.fixture(autouse=True)
def _no_log_rate_limit_left_behind() -> Iterator[None]:
    """A test that runs a CLI command puts `infra.lograte`'s filter on the root logger's
    handlers, pytest's log capture among them, which live for the whole session: a later
    test's 11th line of a kind within 10 s was then held back from its `caplog`."""
    yield
    for handler in logging.getLogger().handlers:
        for found in [f for f in handler.filters if isinstance(f, RateLimitFilter)]:
            handler.removeFilter(found)


@pytest.fixture(scope="session")
def broker() -> Iterator[str]:
    """A real Kafka-compatible broker for the whole session; yields `host:port`."""
    if _docker_available():
        from testcontainers.kafka import KafkaContainer

        with KafkaContainer().with_kraft() as kafka:
            yield kafka.get_bootstrap_server()
        return
    with EmbeddedBroker(port=0) as embedded:
        yield embedded.bootstrap


@pytest.fixture
def unique() -> str:
    """A fresh suffix so every test gets its own topics and groups."""
    return uuid.uuid4().hex[:10]


@pytest.fixture(scope="session")
def demo_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The deterministic demo models written once for the session."""
    from services.models.demo import write_demo_models

    root = tmp_path_factory.mktemp("models")
    write_demo_models(root, seed=0)
    return root

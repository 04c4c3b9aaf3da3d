"""Shared CLI plumbing: logging set-up and running coroutines."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def setup_logging(level: str = "INFO") -> None:
    """key=value logs on stderr; chatty libraries stay at WARNING."""
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    for noisy in ("aiokafka", "faststream", "kafka"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion; Ctrl-C ends it quietly."""
    return asyncio.run(coro)

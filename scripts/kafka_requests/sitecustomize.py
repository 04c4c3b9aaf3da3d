"""Counts every Kafka request each inferbus process sends, for finding where the bus's
requests come from (not for production use).

    mkdir -p /tmp/kreq && PYTHONPATH=scripts/kafka_requests KAFKA_REQUESTS_DIR=/tmp/kreq \\
        inferbus bench throughput ...      # or inferbus up, any command
    python scripts/kafka_requests/rates.py /tmp/kreq

Python imports this module at start-up in every process whose PYTHONPATH holds its folder
(children inherit it). It wraps aiokafka's connection `send` and counts requests by type;
fetches also by their wait and the topics they name. Every 2 s it appends the totals so far
to KAFKA_REQUESTS_DIR/<pid>.jsonl.
"""

from __future__ import annotations

import collections
import json
import os
import sys
import threading
import time
from typing import Any

_OUT = os.environ.get("KAFKA_REQUESTS_DIR")
_counts: collections.Counter[str] = collections.Counter()


def _name(request: Any) -> str:
    name = type(request).__name__
    if name.startswith("Produce"):
        try:
            produced = request._topics  # aiokafka >= 0.12 keeps them private
            topics = "/".join(sorted(t.rsplit(".", 1)[-1] for t, _ in produced))
            parts = sum(len(p) for _, p in produced)
            return f"{name} parts={parts} topics={topics}"
        except AttributeError:
            return name
    if not name.startswith("Fetch"):
        return name
    try:
        topics = "/".join(sorted(t.rsplit(".", 1)[-1] for t, _ in request.topics))
        parts = sum(len(p) for _, p in request.topics)
        return f"{name} wait={request._max_wait_ms} parts={parts} topics={topics}"
    except AttributeError:  # another aiokafka: counted by type alone
        return name


def _install() -> None:
    try:
        from aiokafka import conn
    except ImportError:
        return
    original = conn.AIOKafkaConnection.send

    def send(connection: Any, request: Any, *args: Any, **kw: Any) -> Any:
        _counts[_name(request)] += 1
        return original(connection, request, *args, **kw)

    conn.AIOKafkaConnection.send = send


def _dump() -> None:
    argv = " ".join(sys.argv[1:6])
    path = os.path.join(str(_OUT), f"{os.getpid()}.jsonl")
    while True:
        time.sleep(2)
        with open(path, "a") as out:
            out.write(json.dumps({"argv": argv, "t": time.time(), "counts": dict(_counts)}))
            out.write("\n")


if _OUT:
    _install()
    threading.Thread(target=_dump, daemon=True, name="kafka-requests").start()

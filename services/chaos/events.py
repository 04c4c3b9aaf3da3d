"""Request events as an outside producer writes them: valid ones, and the poison kind."""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from schemas.topics import RESULTS
from services.chaos.model import FEATURES, MODEL


@dataclass(frozen=True, slots=True)
class Event:
    """One event to produce, and what a result for it would carry."""

    value: bytes
    kind: str
    request_id: str | None
    """The id its result would carry; None when it has no usable one (only a DLQ record)."""
    deadline_s: float
    """By when it must have an outcome, epoch seconds (also in the event when it has one)."""
    tier: str | None = None
    key: bytes | None = None
    """Kafka key; None: the request id (or nothing, for an event without one)."""

    @property
    def kafka_key(self) -> bytes | None:
        if self.key is not None:
            return self.key
        return self.request_id.encode() if self.request_id is not None else None


def digest(value: bytes) -> str:
    """What identifies an event's bytes in the DLQ (which carries the original bytes)."""
    return hashlib.blake2b(value, digest_size=16).hexdigest()


def new_id() -> str:
    return uuid.uuid4().hex


def iso(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).isoformat()


def document(
    request_id: str, *, tier: str, deadline_s: float, model: str = MODEL, data: Any = None
) -> dict[str, Any]:
    """A valid request for the chaos model (as a dict, so a fault can change one field)."""
    return {
        "schema_version": 1,
        "request_id": request_id,
        "model": model,
        "tier": tier,
        "inputs": {
            "x": {
                "dtype": "float32",
                "shape": [1, FEATURES],
                "data": data if data is not None else [[0.25] * FEATURES],
            }
        },
        "deadline": iso(deadline_s),
        "reply_to": RESULTS,
    }


def valid(*, tier: str, deadline_s: float, key: bytes | None = None, kind: str = "valid") -> Event:
    """A request the chaos model serves `ok`."""
    request_id = new_id()
    value = orjson.dumps(document(request_id, tier=tier, deadline_s=deadline_s))
    return Event(value, kind, request_id, deadline_s, tier, key)


def nested(depth: int, leaf: str = "0.5") -> str:
    """`depth` nested JSON arrays around one leaf: valid JSON that recursive parsers choke on."""
    return "[" * depth + leaf + "]" * depth


def poison(*, depth: int, tier: str, deadline_s: float, key: bytes | None = None) -> Event:
    """A request whose tensor `data` is nested `depth` deep: dead-lettered or answered."""
    request_id = new_id()
    head = orjson.dumps(document(request_id, tier=tier, deadline_s=deadline_s, data=0))
    # Splice the nesting in as text: no JSON encoder would build it.
    value = head.replace(b'"data":0', b'"data":' + nested(depth).encode(), 1)
    return Event(value, "poison", request_id, deadline_s, tier, key)

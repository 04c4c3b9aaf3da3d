"""Malformed events of every kind a careless or hostile producer writes (pure, seeded)."""

from __future__ import annotations

import random
import struct
from collections.abc import Callable

import orjson

from schemas.frames import MAGIC
from services.chaos.events import Event, document, new_id, poison, valid

BIG_EVENT_BYTES = 5 * 1024 * 1024
LONG_ID_CHARS = 10_000
DEEP_NESTING = 10_000
TIER = "interactive"

Maker = Callable[[random.Random, float], Event]


def _json(kind: str, changes: dict[str, object], deadline_s: float, *, answerable: bool) -> Event:
    request_id = new_id()
    body = {**document(request_id, tier=TIER, deadline_s=deadline_s), **changes}
    return Event(orjson.dumps(body), kind, request_id if answerable else None, deadline_s, TIER)


def random_bytes(rng: random.Random, deadline_s: float) -> Event:
    """Noise; a nonce at the end keeps every event's bytes distinct."""
    value = rng.randbytes(rng.randint(1, 2_000)) + new_id().encode()
    return Event(value, "random-bytes", None, deadline_s)


def truncated_json(rng: random.Random, deadline_s: float) -> Event:
    """A valid request cut short after its id: no parser can read it, so it is dead-lettered."""
    request_id = new_id()
    whole = orjson.dumps(document(request_id, tier=TIER, deadline_s=deadline_s))
    after_id = whole.index(request_id.encode()) + len(request_id) + 1
    return Event(whole[: rng.randint(after_id, len(whole) - 1)], "truncated-json", None, deadline_s)


def nan(_: random.Random, deadline_s: float) -> Event:
    """NaN in a tensor (what Python's json writes): answered `invalid_input`."""
    request_id = new_id()
    text = orjson.dumps(document(request_id, tier=TIER, deadline_s=deadline_s, data=0))
    value = text.replace(b'"data":0', b'"data":[[NaN' + b",0.5" * 15 + b"]]", 1)
    return Event(value, "nan", request_id, deadline_s, TIER)


def huge_number(_: random.Random, deadline_s: float) -> Event:
    """A number no float holds (1e400) and an integer of 400 digits."""
    request_id = new_id()
    text = orjson.dumps(document(request_id, tier=TIER, deadline_s=deadline_s, data=0))
    value = text.replace(b'"data":0', b'"data":[[1e400,' + b"9" * 400 + b",0.5" * 14 + b"]]", 1)
    return Event(value, "huge-number", request_id, deadline_s, TIER)


def wrong_dtype(_: random.Random, deadline_s: float) -> Event:
    request_id = new_id()
    body = document(request_id, tier=TIER, deadline_s=deadline_s)
    body["inputs"]["x"]["dtype"] = "int8"
    return Event(orjson.dumps(body), "wrong-dtype", request_id, deadline_s, TIER)


def wrong_shape(_: random.Random, deadline_s: float) -> Event:
    request_id = new_id()
    body = document(request_id, tier=TIER, deadline_s=deadline_s, data=[[0.5] * 15])
    body["inputs"]["x"]["shape"] = [1, 15]
    return Event(orjson.dumps(body), "wrong-shape", request_id, deadline_s, TIER)


def unknown_model(_: random.Random, deadline_s: float) -> Event:
    return _json("unknown-model", {"model": "no-such-model"}, deadline_s, answerable=True)


def illegal_reply_to(_: random.Random, deadline_s: float) -> Event:
    """An illegal reply topic: the error goes to the default results topic instead."""
    return _json("illegal-reply-to", {"reply_to": "not a topic!"}, deadline_s, answerable=True)


def big(_: random.Random, deadline_s: float) -> Event:
    """A 5 MB event (over ingest's size limit, under the broker's)."""
    pad = "x" * BIG_EVENT_BYTES
    return _json("big-5mb", {"metadata": {"pad": pad}}, deadline_s, answerable=True)


def long_id(_: random.Random, deadline_s: float) -> Event:
    """A 10,000-character request id: too long to answer, so dead-lettered."""
    request_id = new_id() + "i" * (LONG_ID_CHARS - 32)
    body = document(request_id, tier=TIER, deadline_s=deadline_s)
    return Event(orjson.dumps(body), "long-id", None, deadline_s, TIER, new_id().encode())


def deep_nesting(_: random.Random, deadline_s: float) -> Event:
    event = poison(depth=DEEP_NESTING, tier=TIER, deadline_s=deadline_s)
    return Event(event.value, "deep-nesting", event.request_id, deadline_s, TIER)


def unicode(rng: random.Random, deadline_s: float) -> Event:
    """Non-ASCII everywhere: id, model, tenant (an id of at most 128 characters)."""
    request_id = "ü-" + new_id() + "".join(chr(rng.randint(0x100, 0x2FFF)) for _ in range(20))
    body = {
        **document(request_id, tier=TIER, deadline_s=deadline_s),
        "model": "mödel-☃",
        "tenant": "tënant-🦀",
    }
    return Event(orjson.dumps(body), "unicode", request_id, deadline_s, TIER)


def wrong_types(_: random.Random, deadline_s: float) -> Event:
    """A numeric request id and a string for the inputs: nothing to answer."""
    body = {"request_id": 12345, "model": 7, "inputs": "x", "nonce": new_id()}
    return Event(orjson.dumps(body), "wrong-types", None, deadline_s)


def bad_frame(rng: random.Random, deadline_s: float) -> Event:
    """Frame magic with an envelope length longer than the event."""
    nonce = new_id().encode()
    value = struct.pack(">4sI", MAGIC, 1_000_000 + rng.randint(0, 1000)) + nonce
    return Event(value, "bad-frame", None, deadline_s)


def json_array(_: random.Random, deadline_s: float) -> Event:
    return Event(orjson.dumps([new_id(), 1, None]), "json-array", None, deadline_s)


def control(_: random.Random, deadline_s: float) -> Event:
    """A valid request among the storm: it must still be served."""
    return valid(tier=TIER, deadline_s=deadline_s, kind="control")


KINDS: dict[str, Maker] = {
    "random-bytes": random_bytes,
    "truncated-json": truncated_json,
    "nan": nan,
    "huge-number": huge_number,
    "wrong-dtype": wrong_dtype,
    "wrong-shape": wrong_shape,
    "unknown-model": unknown_model,
    "illegal-reply-to": illegal_reply_to,
    "long-id": long_id,
    "deep-nesting": deep_nesting,
    "unicode": unicode,
    "wrong-types": wrong_types,
    "bad-frame": bad_frame,
    "json-array": json_array,
    "control": control,
    "big-5mb": big,
}
BIG = "big-5mb"


def plan(count: int, big_count: int, *, seed: int) -> list[str]:
    """The kinds of a storm, shuffled: `count` small ones in turn, and `big_count` 5 MB ones."""
    rng = random.Random(seed)
    small = [kind for kind in KINDS if kind != BIG]
    kinds = [small[i % len(small)] for i in range(count)] + [BIG] * big_count
    rng.shuffle(kinds)
    return kinds


def make(kind: str, rng: random.Random, deadline_s: float) -> Event:
    """One event of a kind (built when it is sent: a 5 MB event is not kept around)."""
    return KINDS[kind](rng, deadline_s)

"""Request events from bytes: a JSON event or a binary frame, validated by the pydantic model.

pydantic-core parses and validates in one pass (about as fast as orjson plus hand checks,
measured), and its JSON parser bounds nesting depth, so every event gets the model's
own status and message. Only an event that fails is parsed a second time, to find out
whom to answer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import orjson
from pydantic import ValidationError

from schemas.errors import InvalidInput, Unparseable, describe_validation_error
from schemas.frames import MAGIC, FrameError, is_frame, split_frame
from schemas.request import InferenceRequest
from schemas.tensors import Buffer
from schemas.topics import RESULTS, TIERS, is_reply_topic

_TIERS = frozenset(TIERS)
_BOM = b"\xef\xbb\xbf"
"""UTF-8's byte order mark."""


@dataclass(frozen=True, slots=True)
class ParsedRequest:
    """A valid request, and a binary frame's payload (None for a JSON event)."""

    request: InferenceRequest
    payload: memoryview | None = None

    @property
    def framed(self) -> bool:
        """The request came as a binary frame (its answer goes back as one)."""
        return self.payload is not None


@dataclass(frozen=True, slots=True)
class Salvage:
    """What an invalid event still tells: where and to whom to send its error result."""

    request_id: str
    reply_to: str
    model: str
    tenant: str | None
    tier: str
    """The tier it named when that is a real tier (a metrics label), else `-`."""
    framed: bool = False


class RejectedEvent(InvalidInput):
    """The event has a request id but breaks the schema: answer it via `salvage`."""

    def __init__(self, message: str, salvage: Salvage, **context: Any) -> None:
        super().__init__(message, **context)
        self.salvage = salvage


def parse_request(value: bytes | None) -> ParsedRequest:
    """The request in a JSON event or a binary frame.

    Raises Unparseable when no request id can be read (the event goes to the DLQ), and
    RejectedEvent (an InvalidInput) when one can but the event breaks the schema.
    """
    envelope, payload = split_event(value)
    try:
        return ParsedRequest(InferenceRequest.model_validate_json(envelope), payload)
    except ValidationError as exc:
        failure = exc
    raw = load_object(envelope, framed=payload is not None)
    where = _lone_surrogate_at(raw) if _lone_surrogate(failure) else None
    message = (
        describe_validation_error(failure)
        if where is None
        else f"{where}: a lone \\uD800-\\uDFFF escape, which is half of a surrogate pair "
        "and no character: escape the pair, or send the character as UTF-8"
    )
    raise RejectedEvent(message, salvage(raw, framed=payload is not None))


def _lone_surrogate(failure: ValidationError) -> bool:
    """The JSON parser refused the event over a lone surrogate escape (its words for it)."""
    first = failure.errors(include_url=False)[0]
    return first["type"] == "json_invalid" and "hex escape" in first["msg"]


def _lone_surrogate_at(value: Any, path: str = "") -> str | None:
    """The field path (`metadata.k`, `inputs.x.text`) of the first key or string in a parsed
    event that UTF-8 cannot carry; None if there is none."""
    if isinstance(value, str):
        return (path or "<event>") if _text(value) is None else None
    if isinstance(value, dict):
        items: list[tuple[Any, Any]] = list(value.items())
    elif isinstance(value, list):
        items = list(enumerate(value))
    else:
        return None
    for key, item in items:
        if isinstance(key, str) and _text(key) is None:
            return f"{path or '<event>'} (a key)"
        found = _lone_surrogate_at(item, f"{path}.{key}" if path else str(key))
        if found is not None:
            return found
    return None


def split_event(value: bytes | None) -> tuple[bytes, memoryview | None]:
    """(JSON envelope, frame payload or None); Unparseable for a tombstone or a bad frame."""
    if value is None:
        raise Unparseable("event has no value (a tombstone?)")
    if not is_frame(value):
        if value[:3].upper() == MAGIC[:3]:
            raise Unparseable(
                f"event starts with {bytes(value[:4])!r}, a binary frame of an unknown magic or "
                f"version: this inferbus reads {MAGIC!r} frames and JSON"
            )
        # RFC 8259 lets a parser ignore a byte order mark, and some .NET writers add one.
        return (value[len(_BOM) :] if value.startswith(_BOM) else value), None
    try:
        envelope, payload = split_frame(value)
    except FrameError as exc:
        raise Unparseable(f"event is not a valid binary frame: {exc}") from None
    return bytes(envelope), payload


def load_object(envelope: bytes, *, framed: bool = False) -> dict[str, Any]:
    """The event's JSON object with a usable request id, or Unparseable: nothing to answer.

    orjson bounds nesting (1,024 levels); Python's parser is the fallback for the JSON
    orjson refuses (NaN and Infinity, which many producers write, integers past 64 bits,
    lone surrogate escapes), so such an event is answered, not lost.
    `framed`: the JSON is a binary frame's envelope (its messages say so).
    """
    raw = _loads(envelope, framed=framed)
    if not isinstance(raw, dict):
        what = "the frame's envelope" if framed else "event"
        raise Unparseable(f"{what} is a JSON {_json_kind(raw)}, not an object")
    rid = _text(raw.get("request_id"))
    if rid is None or not 0 < len(rid) <= 128:
        raise Unparseable("event has no usable `request_id` (1-128 chars of Unicode text)")
    return raw


def _text(value: Any) -> str | None:
    """`value` if it is a string that UTF-8 can carry (Python's parser lets a lone surrogate
    escape through, which no answer could then be encoded with), else None."""
    if not isinstance(value, str):
        return None
    try:
        value.encode()
    except UnicodeEncodeError:
        return None
    return value


ECHO_MAX_CHARS = 128
"""The most of a refused event's `model` or `tenant` its error answer echoes: a 500 KB
model name made a 500 KB answer (the schema allows 63 and 128 characters)."""


def _echo(value: Any, limit: int) -> str | None:
    """A string field of a refused event as its answer carries it: at most `limit`
    characters, and only text UTF-8 can carry (`_text`)."""
    text = _text(value)
    if text is None or len(text) <= limit:
        return text
    return f"{text[: limit - 1]}…"


def _json_kind(value: Any) -> str:
    """What JSON calls the type of a parsed value (not Python's name for it)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return "string" if isinstance(value, str) else "array"


ORJSON_DEPTH_ERROR = "depth limit exceeded"
"""How orjson's error begins for nesting past its limit (1,024 levels)."""


def _loads(envelope: Buffer, *, framed: bool = False) -> Any:
    try:
        return orjson.loads(envelope)
    except orjson.JSONDecodeError as exc:
        strict_error = exc
    data = bytes(envelope)
    try:
        # Strictly UTF-8 first: given bytes, Python's parser would guess UTF-16 or UTF-32.
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Unparseable(
            f"event is not UTF-8 text (byte 0x{data[exc.start]:02x} at position {exc.start}): "
            "send UTF-8 JSON or a binary frame"
        ) from None
    # JSON that orjson does not take: NaN, Infinity, an integer past 64 bits, a lone
    # surrogate escape: its id is read, and it is answered. Not nesting past orjson's depth
    # limit: how deep Python's parser goes depends on the Python (3.11 stops near 1,000
    # levels, 3.13 took 5,000), and the same event must get the same outcome everywhere.
    if not str(strict_error).startswith(ORJSON_DEPTH_ERROR):
        try:
            return json.loads(text)
        except (ValueError, RecursionError):
            pass
    if framed:
        raise Unparseable(
            f"the frame's envelope (the {len(data)} bytes its length at bytes 4-7 names) is not "
            f"JSON: {str(strict_error)[:200]}"
        )
    raise Unparseable(f"event is not JSON: {str(strict_error)[:200]}")


def salvage_event(envelope: bytes, payload: memoryview | None) -> Salvage:
    """Where to answer an event (`split_event`'s parts); Unparseable when it names no id."""
    framed = payload is not None
    return salvage(load_object(envelope, framed=framed), framed=framed)


def salvage(raw: dict[str, Any], *, framed: bool = False) -> Salvage:
    """Where to answer an event whose request id is known, from whatever else it holds."""
    reply_to = raw.get("reply_to")
    tier = raw.get("tier", "interactive")
    return Salvage(
        request_id=str(raw["request_id"]),
        reply_to=reply_to if isinstance(reply_to, str) and is_reply_topic(reply_to) else RESULTS,
        model=_echo(raw.get("model"), ECHO_MAX_CHARS) or "",
        tenant=_echo(raw.get("tenant"), ECHO_MAX_CHARS),
        tier=tier if isinstance(tier, str) and tier in _TIERS else "-",
        framed=framed,
    )

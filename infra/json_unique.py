"""JSON that a person wrote: an object that names a key twice is refused, not half read."""

from __future__ import annotations

import json
from typing import Any


class RepeatedKeyError(ValueError):
    """A JSON object names the same key twice (json.loads would keep the last in silence)."""


def _refuse_repeated_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise RepeatedKeyError(f"{key!r} is written twice in one object (the last would win)")
        seen[key] = value
    return seen


def loads_unique_keys(text: str | bytes) -> Any:
    """`json.loads`, raising RepeatedKeyError for an object that names a key twice, and
    JSONDecodeError for nesting deeper than the parser's stack (RecursionError, a traceback
    for whoever called it with a file of `[[[[…`)."""
    try:
        return json.loads(text, object_pairs_hook=_refuse_repeated_keys)
    except RecursionError:
        doc = text if isinstance(text, str) else text.decode("utf-8", "replace")
        raise json.JSONDecodeError("nested deeper than this parser reads", doc, 0) from None

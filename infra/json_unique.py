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
    """`json.loads`, raising RepeatedKeyError for an object that names a key twice."""
    return json.loads(text, object_pairs_hook=_refuse_repeated_keys)

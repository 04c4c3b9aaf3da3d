"""The canary split: a stable hash of the request's key decides its lane."""

from __future__ import annotations

import hashlib

from schemas.topics import Lane

_SCALE = float(2**64)


def split_point(model: str, key: str) -> float:
    """Where `key` falls in [0, 1) for `model`: the same in every process and language
    (BLAKE2b-64 of `<model>/<key>`, big-endian, over 2^64).

    The model is part of the hash so that with `key: tenant` the same tenants are not the
    canary's guinea pigs for every model at once.
    """
    digest = hashlib.blake2b(f"{model}/{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / _SCALE


def lane_for(model: str, key: str, share: float) -> Lane:
    """`canary` for a `share` of the keys, always the same ones; raising the share only
    moves keys from stable to canary, never back."""
    return "canary" if split_point(model, key) < share else "stable"

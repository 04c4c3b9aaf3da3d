"""Binary frames (wire format v1): a JSON envelope followed by raw tensor bytes.

```
bytes 0-3   b"IBF1"                     magic: inferbus frame, layout 1
bytes 4-7   N, uint32 big-endian        length of the envelope
bytes 8..   the envelope: N bytes of UTF-8 JSON, an InferenceRequest or InferenceResult
then        the payload: tensors whose envelope entry says {"raw": {"offset", "nbytes"}}
            are payload[offset : offset + nbytes], little-endian, C order
```

A JSON event starts with `{` (or whitespace), never with the magic, so one topic carries
both forms and the first bytes tell them apart.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from schemas.tensors import Buffer

MAGIC = b"IBF1"
CONTENT_TYPE = b"application/vnd.inferbus.frame"
_HEAD = struct.Struct(">4sI")
HEADER_BYTES = _HEAD.size


class FrameError(ValueError):
    """The bytes start like a frame but do not hold one."""


def is_frame(value: Buffer) -> bool:
    """True when `value` starts with the frame magic."""
    return bytes(value[:4]) == MAGIC


def split_frame(value: bytes) -> tuple[memoryview, memoryview]:
    """(envelope, payload) of a frame, as views of `value` (no copy)."""
    if len(value) < HEADER_BYTES:
        raise FrameError(f"frame is {len(value)} bytes, shorter than its 8-byte header")
    magic, length = _HEAD.unpack_from(value)
    if magic != MAGIC:
        raise FrameError(f"frame magic is {magic!r}, not {MAGIC!r}")
    end = HEADER_BYTES + length
    if end > len(value):
        raise FrameError(
            f"frame says its envelope is {length} bytes; only {len(value) - HEADER_BYTES} follow "
            "(bytes 4-7 hold the envelope's length as an unsigned 32-bit big-endian number)"
        )
    view = memoryview(value)
    return view[HEADER_BYTES:end], view[end:]


def join_frame(envelope: bytes, payload: Sequence[Buffer] = ()) -> bytes:
    """A frame from an encoded envelope and payload pieces, in order."""
    return b"".join((_HEAD.pack(MAGIC, len(envelope)), envelope, *payload))

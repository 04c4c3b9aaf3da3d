"""Binary frames: the envelope and payload round trip, and every malformed frame is named."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import orjson
import pytest

from schemas import parse
from schemas.errors import Unparseable
from schemas.frames import MAGIC, FrameError, is_frame, join_frame, split_frame
from schemas.parse import RejectedEvent, parse_request
from schemas.tensors import TensorDecodeError


def envelope(**tensor: Any) -> dict[str, Any]:
    x = {"dtype": "float32", "shape": [1, 4], **tensor}
    return {"request_id": "r-1", "model": "demo-mlp", "inputs": {"x": x}}


def frame(document: dict[str, Any], *payload: bytes) -> bytes:
    return join_frame(json.dumps(document).encode(), payload)


def test_round_trip_gives_views_of_the_same_bytes() -> None:
    value = join_frame(b'{"a": 1}', [b"abc", b"defg"])
    head, payload = split_frame(value)
    assert is_frame(value)
    assert bytes(head) == b'{"a": 1}'
    assert bytes(payload) == b"abcdefg"
    assert not is_frame(b'{"a": 1}')


@pytest.mark.parametrize(
    ("value", "message"),
    [
        pytest.param(MAGIC, "shorter than its 8-byte header", id="header-cut"),
        pytest.param(MAGIC + b"\x00\x00\x00\x10{}", "only 2 follow", id="envelope-cut"),
        pytest.param(b"IBF2\x00\x00\x00\x00", "magic", id="other-magic"),
    ],
)
def test_malformed_frames_are_named(value: bytes, message: str) -> None:
    with pytest.raises(FrameError, match=message):
        split_frame(value)


def test_a_framed_request_decodes_its_raw_tensor_without_copying() -> None:
    x = np.arange(4, dtype="<f4").reshape(1, 4)
    value = frame(envelope(raw={"offset": 0, "nbytes": 16}), x.tobytes())

    parsed = parse_request(value)

    assert parsed.framed
    array = parsed.request.inputs["x"].to_numpy(parsed.payload)  # type: ignore[union-attr]
    np.testing.assert_array_equal(array, x)
    assert not array.flags.writeable, "a view of the record's bytes"


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        pytest.param(MAGIC + b"\x00\x00\x01\x00", Unparseable, "binary frame", id="cut-frame"),
        pytest.param(join_frame(b"[1]"), Unparseable, "not an object", id="envelope-not-object"),
        pytest.param(join_frame(b"{nope"), Unparseable, "not JSON", id="envelope-not-json"),
    ],
)
def test_frames_without_a_readable_request_id_are_unparseable(
    value: bytes, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        parse_request(value)


def test_a_framed_event_that_breaks_the_schema_is_answered_as_a_frame() -> None:
    with pytest.raises(RejectedEvent) as caught:
        parse_request(frame({**envelope(raw={"offset": 0, "nbytes": 16}), "tier": "gold"}))
    assert caught.value.salvage.framed
    assert caught.value.salvage.request_id == "r-1"
    assert "tier" in caught.value.message


@pytest.mark.parametrize(
    ("raw", "payload", "message"),
    [
        pytest.param({"offset": 0, "nbytes": 12}, b"\0" * 16, "needs 16", id="short-slice"),
        pytest.param({"offset": 8, "nbytes": 16}, b"\0" * 16, "reaches byte 24", id="past-end"),
    ],
)
def test_raw_slices_that_do_not_fit_are_named(
    raw: dict[str, int], payload: bytes, message: str
) -> None:
    parsed = parse_request(frame(envelope(raw=raw), payload))
    with pytest.raises(TensorDecodeError, match=message):
        parsed.request.inputs["x"].to_numpy(parsed.payload)  # type: ignore[union-attr]


def test_a_raw_tensor_in_plain_json_needs_a_frame() -> None:
    parsed = parse_request(json.dumps(envelope(raw={"offset": 0, "nbytes": 16})).encode())
    with pytest.raises(TensorDecodeError, match="needs a binary frame"):
        parsed.request.inputs["x"].to_numpy(parsed.payload)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        pytest.param(
            join_frame(b'{"request_id"'),
            "the frame's envelope (the 13 bytes its length at bytes 4-7 names) is not JSON",
            id="envelope-cut-short",
        ),
        pytest.param(
            MAGIC + b"\x10\x00\x00\x00{}",
            "unsigned 32-bit big-endian",
            id="little-endian-length",
        ),
        pytest.param(join_frame(b"true"), "a JSON boolean, not an object", id="envelope-boolean"),
    ],
)
def test_a_broken_frame_says_which_part_is_broken(value: bytes, message: str) -> None:
    with pytest.raises(Unparseable) as caught:
        parse_request(value)
    assert message in caught.value.message


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            '"tenant": "\\ud800"', "tenant: a lone \\uD800-\\uDFFF escape", id="lone-surrogate"
        ),
        pytest.param(
            '"metadata": {"\\udc00": "v"}', "metadata (a key): a lone", id="lone-surrogate-key"
        ),
        pytest.param('"metadata": {"n": 1' + "0" * 400 + "}", "metadata.n", id="huge-integer"),
    ],
)
def test_json_that_orjson_refuses_is_still_answered(text: str, message: str) -> None:
    """Valid JSON grammar that the fast parser does not take: the id is read all the same,
    so the producer gets an answer, not a DLQ record it may never read."""
    document = json.dumps(envelope(data=[[1, 2, 3, 4]]))
    with pytest.raises(RejectedEvent) as caught:
        parse_request(f"{document[:-1]}, {text}}}".encode())
    assert caught.value.salvage.request_id == "r-1"
    assert message in caught.value.message


@pytest.mark.parametrize("depth", [1_100, 5_000, 50_000], ids=["just-past", "5k", "50k"])
def test_nesting_past_orjsons_limit_is_refused_the_same_on_every_python(depth: int) -> None:
    """Python's own parser, the fallback for NaN and big integers, took 5,000 levels on 3.13
    and refused them on 3.11: the same event was answered on one and dead-lettered on the
    other. Past orjson's limit it is now unparseable everywhere, and orjson says why."""
    event = b'{"request_id": "r-1", "inputs": {"x": {"data": ' + b"[" * depth + b"]" * depth
    event += b"}}}"
    with pytest.raises(orjson.JSONDecodeError, match=f"^{parse.ORJSON_DEPTH_ERROR}"):
        orjson.loads(event)
    with pytest.raises(Unparseable, match="event is not JSON: depth limit exceeded"):
        parse.load_object(event)

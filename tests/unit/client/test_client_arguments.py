"""What the client refuses before anything reaches the broker, each naming what is wrong."""

from __future__ import annotations

import asyncio
import math
import threading
from typing import Any

import numpy as np
import pytest

from schemas.request import MAX_TIMEOUT_MS, InferenceRequest
from schemas.result import InferenceResult
from schemas.tensors import Tensor
from services.client import InferenceClient, SyncInferenceClient
from services.client.sync import server_timeout_ms

X = np.ones((1, 16), dtype=np.float32)
CLIENT = InferenceClient("127.0.0.1:1", reply_to="inferbus.results.mine")


@pytest.mark.parametrize(
    ("inputs", "kwargs", "message"),
    [
        pytest.param(
            {"x": X}, {"request_id": ""}, "request_id: String should have at least 1", id="empty-id"
        ),
        pytest.param({"x": X}, {"request_id": "r" * 129}, "at most 128 characters", id="long-id"),
        pytest.param({"x": X}, {"tier": "urgent"}, "tier: Input should be", id="tier"),
        pytest.param(
            {"x": np.float32(1.0)}, {}, "input 'x': shape: List should have at least 1", id="0-d"
        ),
        pytest.param(
            {"x": X.astype(np.uint16)}, {}, "input 'x': dtype uint16 is not carried", id="dtype"
        ),
    ],
)
def test_build_request_refuses_naming_the_field(
    inputs: dict[str, Any], kwargs: dict[str, Any], message: str
) -> None:
    """These raised pydantic's multi-line dumps, or an id of "" was replaced by a random one."""
    with pytest.raises(ValueError, match=message) as refused:
        CLIENT.build_request("demo-mlp", inputs, **kwargs)
    assert "errors.pydantic.dev" not in str(refused.value)


def test_an_empty_list_is_not_text() -> None:
    """`{"x": []}` was sent as text: "model has no tokenizer" for a request with no text."""
    wire = CLIENT.build_request("demo-mlp", {"x": []}, form="json")
    assert wire.envelope.inputs["x"].__class__.__name__ == "Tensor"


@pytest.mark.parametrize(
    ("timeout_s", "timeout_ms"),
    [
        pytest.param(0.0005, 1, id="under-a-millisecond"),
        pytest.param(2.5, 2500, id="seconds"),
        pytest.param(1e7, MAX_TIMEOUT_MS, id="past-the-wire-bound"),
        pytest.param(math.inf, None, id="no-end"),
    ],
)
def test_the_sync_timeout_becomes_a_timeout_ms_the_wire_takes(
    timeout_s: float, timeout_ms: int | None
) -> None:
    """timeout_s=0.0005, 1e7 and inf failed on a field the caller never set."""
    assert server_timeout_ms(timeout_s) == timeout_ms


@pytest.mark.parametrize("timeout_s", [0.0, -1.0, math.nan, "5", None, True])
async def test_infer_refuses_a_timeout_that_is_not_a_positive_number(timeout_s: Any) -> None:
    """ "5" and None raised TypeError from a comparison inside the client."""
    request = CLIENT.build_request("demo-mlp", {"x": X})
    with pytest.raises(ValueError, match="timeout_s must be a number of seconds > 0"):
        await CLIENT.infer(request, timeout_s=timeout_s)


async def test_infer_refuses_a_request_answered_elsewhere() -> None:
    """A request built by hand answers to `inferbus.results`: its infer waited out its
    timeout although this client could never see the result."""
    tensor = {"dtype": "float32", "shape": [1], "data": [1]}
    request = InferenceRequest.model_validate(
        {"request_id": "r-1", "model": "demo-mlp", "inputs": {"x": tensor}}
    )
    with pytest.raises(ValueError, match=r"answers to 'inferbus\.results', but this client"):
        await CLIENT.infer(request, timeout_s=5)


@pytest.mark.parametrize("encoding", ["list", "b64"])
def test_outputs_are_read_only_in_every_form(encoding: str) -> None:
    """A frame's or base64's output was read-only and a list's writable: `y /= y.sum()`
    worked or failed by the form the result travelled in."""
    y = np.array([[1.0, 2.0]], dtype=np.float32)
    tensor = Tensor.from_numpy(y, encoding=encoding)  # type: ignore[arg-type]
    result = InferenceResult.model_validate(
        {"request_id": "r", "model": "m", "status": "ok", "outputs": {"y": tensor.model_dump()}}
    )
    out = result.output("y")
    assert not out.flags.writeable
    np.testing.assert_array_equal(out, y)


@pytest.mark.parametrize("topic", ["bad topic!", "inferbus.dlq", ""])
def test_a_reply_topic_results_cannot_go_to_is_refused_at_once(topic: str) -> None:
    """`reply_to="bad topic!"` waited 5 s, then said the topic did not exist: create it."""
    with pytest.raises(ValueError, match="is not a topic results may go to"):
        InferenceClient("127.0.0.1:1", reply_to=topic)


@pytest.mark.parametrize("timeout_s", ["5", None, -1.0, math.nan])
def test_the_sync_client_refuses_a_timeout_that_is_not_a_positive_number(
    timeout_s: Any,
) -> None:
    client = SyncInferenceClient.__new__(SyncInferenceClient)  # no broker: refused first
    with pytest.raises(ValueError, match="timeout_s must be a number of seconds > 0"):
        client.infer("demo-mlp", {"x": X}, timeout_s=timeout_s)


def test_a_form_that_is_neither_frame_nor_json_is_refused() -> None:
    """form="xml" was sent as JSON without a word."""
    with pytest.raises(ValueError, match="form must be 'frame' or 'json', not 'xml'"):
        CLIENT.build_request("demo-mlp", {"x": X}, form="xml")  # type: ignore[arg-type]


@pytest.mark.parametrize("bootstrap", ["127.0.0.1:notaport", "127.0.0.1:", "a:1,b:x", "[::1]:x"])
def test_a_bootstrap_whose_port_is_no_number_is_refused_at_once(bootstrap: str) -> None:
    """aiokafka's `int()` ValueError came out of `start()`, a traceback from its insides."""
    refused = r"is not host\[:port\] with a numeric port from 1 to 65535"
    with pytest.raises(ValueError, match=refused):
        InferenceClient(bootstrap)


@pytest.mark.parametrize("bootstrap", ["127.0.0.1:9092", "h", "a:1, b:2", "[::1]:9092"])
def test_bootstraps_aiokafka_reads_are_taken(bootstrap: str) -> None:
    assert InferenceClient(bootstrap).bootstrap == bootstrap


async def test_results_of_a_client_never_started_is_refused() -> None:
    """It waited forever: no reader would ever fill the stream."""
    with pytest.raises(RuntimeError, match="not started"):
        async with asyncio.timeout(5):
            async for _ in InferenceClient("127.0.0.1:1").results():
                pass


def test_a_sync_client_refused_at_construction_leaves_no_thread() -> None:
    """Its event loop thread was started before the arguments were checked, and stayed."""
    before = threading.active_count()
    for _ in range(3):
        with pytest.raises(ValueError, match="is not a topic results may go to"):
            SyncInferenceClient("127.0.0.1:1", reply_to="bad topic!")
    assert threading.active_count() == before

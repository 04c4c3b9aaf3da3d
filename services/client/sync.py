"""A blocking wrapper around InferenceClient for scripts and notebooks."""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Coroutine, Mapping
from types import TracebackType
from typing import Any, TypeVar

from schemas.request import MAX_TIMEOUT_MS, InferenceRequest
from schemas.result import InferenceResult
from schemas.topics import RESULTS, Tier
from services.client.client import ClientStopped, InferenceClient, check_timeout_s
from services.client.wire import InputValue, WireRequest

T = TypeVar("T")


def server_timeout_ms(timeout_s: float) -> int | None:
    """The request's `timeout_ms` for a caller who waits `timeout_s`: the server drops what
    nobody waits for any more. At least 1 ms, at most the wire's bound; None (no deadline)
    for an infinite wait."""
    if math.isinf(timeout_s):
        return None
    return min(max(math.ceil(timeout_s * 1000), 1), MAX_TIMEOUT_MS)


class SyncInferenceClient:
    """Runs an InferenceClient on a private event loop thread."""

    def __init__(
        self, bootstrap: str, *, reply_to: str = RESULTS, tenant: str | None = None
    ) -> None:
        # First: arguments it refuses leave no loop thread behind.
        self._client = InferenceClient(bootstrap, reply_to=reply_to, tenant=tenant)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._closed = False
        try:
            self._call(self._client.start())
        except BaseException:
            self._end_loop()  # a client that could not start leaves no thread behind
            raise

    def _call(self, coro: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        if self._closed:
            coro.close()
            raise ClientStopped("SyncInferenceClient is closed: use a new one")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout_s)

    def infer(
        self,
        model: str,
        inputs: Mapping[str, InputValue],
        *,
        tier: Tier = "interactive",
        timeout_s: float = 30.0,
    ) -> InferenceResult:
        """Submit and wait for the result. `timeout_s` is also the request's `timeout_ms`
        (`server_timeout_ms`): the server answers `deadline_exceeded` rather than run what
        nobody waits for."""
        check_timeout_s(timeout_s)
        request = self._client.build_request(
            model, inputs, tier=tier, timeout_ms=server_timeout_ms(timeout_s)
        )
        return self._call(self._client.infer(request, timeout_s=timeout_s))

    def submit(self, request: WireRequest | InferenceRequest) -> str:
        """Fire and forget."""
        return self._call(self._client.submit(request))

    def close(self) -> None:
        """Stop the client and its loop thread; closing again does nothing, and any other
        call after it raises ClientStopped."""
        if self._closed:
            return
        try:
            self._call(self._client.stop())
        finally:
            self._end_loop()

    def _end_loop(self) -> None:
        self._closed = True
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self._loop.close()

    def __enter__(self) -> SyncInferenceClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

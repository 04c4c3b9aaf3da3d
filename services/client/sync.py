"""A blocking wrapper around InferenceClient for scripts and notebooks."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Mapping
from types import TracebackType
from typing import Any, TypeVar

from schemas.request import InferenceRequest
from schemas.result import InferenceResult
from schemas.topics import RESULTS, Tier
from services.client.client import InferenceClient
from services.client.wire import InputValue, WireRequest

T = TypeVar("T")


class SyncInferenceClient:
    """Runs an InferenceClient on a private event loop thread."""

    def __init__(
        self, bootstrap: str, *, reply_to: str = RESULTS, tenant: str | None = None
    ) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._client = InferenceClient(bootstrap, reply_to=reply_to, tenant=tenant)
        self._call(self._client.start())

    def _call(self, coro: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout_s)

    def infer(
        self,
        model: str,
        inputs: Mapping[str, InputValue],
        *,
        tier: Tier = "interactive",
        timeout_s: float = 30.0,
    ) -> InferenceResult:
        """Submit and wait for the result."""
        request = self._client.build_request(
            model, inputs, tier=tier, timeout_ms=int(timeout_s * 1000)
        )
        return self._call(self._client.infer(request, timeout_s=timeout_s))

    def submit(self, request: WireRequest | InferenceRequest) -> str:
        """Fire and forget."""
        return self._call(self._client.submit(request))

    def close(self) -> None:
        """Stop the client and its loop thread."""
        self._call(self._client.stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)

    def __enter__(self) -> SyncInferenceClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

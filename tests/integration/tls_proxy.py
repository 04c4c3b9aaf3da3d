"""A TLS-terminating TCP proxy that requires a client certificate (mutual TLS), for tests.

It runs its own event loop in a thread, so one proxy serves a whole test session while
each test has its own loop. Every accepted connection is piped to a plain-TCP upstream
(the embedded broker); the broker advertises the proxy's address, so clients come back
through it for every connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import threading
from pathlib import Path


def server_context(cert: Path, key: Path, client_ca: Path) -> ssl.SSLContext:
    """A server context that refuses any client without a certificate signed by `client_ca`."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=client_ca)
    context.load_cert_chain(cert, key)
    context.verify_mode = ssl.CERT_REQUIRED
    return context


class TlsProxy:
    """Listens with TLS on `host:port`, forwards to `upstream`; `start`/`stop` are idempotent."""

    def __init__(self, context: ssl.SSLContext, host: str = "127.0.0.1") -> None:
        self._context = context
        self.host = host
        self.port = 0
        self.upstream: tuple[str, int] | None = None
        self.accepted = 0
        """Connections that completed the TLS handshake (with a valid client certificate)."""
        self.refused = 0
        """Handshakes that failed (no client certificate, an untrusted one, not TLS)."""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="tls-proxy")
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> str:
        """Bind (a free port) and serve; returns `host:port`. Set `upstream` before clients come."""
        if self._server is None:
            self._thread.start()
            self._server = asyncio.run_coroutine_threadsafe(self._bind(), self._loop).result(10)
            self.port = self._server.sockets[0].getsockname()[1]
        return self.address

    async def _bind(self) -> asyncio.Server:
        # The handshake is done by hand in _serve, so that a refused one is counted.
        return await asyncio.start_server(self._serve, self.host, 0)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        task.add_done_callback(self._connections.discard)
        try:
            await writer.start_tls(self._context, ssl_handshake_timeout=10)
        except (ssl.SSLError, OSError, TimeoutError):
            self.refused += 1
            writer.close()
            return
        self.accepted += 1
        if self.upstream is None:
            writer.close()
            return
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (OSError, ssl.SSLError):
            pass  # The other side went away; closing below ends the peer pipe too.
        finally:
            writer.close()
            with contextlib.suppress(OSError, ssl.SSLError):
                await writer.wait_closed()

    def stop(self) -> None:
        """Close the listener and every connection, then end the thread."""
        server, self._server = self._server, None
        if server is None:
            return

        async def close() -> None:
            server.close()
            for task in list(self._connections):
                task.cancel()
            await asyncio.gather(*self._connections, return_exceptions=True)
            await server.wait_closed()

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

"""The HTTPS server under :class:`~rl_lustre.testing.kube.KubeFake`: aiohttp on its own thread.

:class:`TlsServer` serves one request handler on ``127.0.0.1:<free port>`` with a CA
generated at start (as a GKE control plane hands its CA to clients separately), runs a
background coroutine beside it (the simulated controllers' ticker), runs functions on its
loop for callers on other threads, and can go away and come back on the same port (an
outage). It knows nothing of Kubernetes.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import tempfile
import threading
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ._kube_certs import make_certs

if TYPE_CHECKING:
    from aiohttp import web

logger = logging.getLogger("rl_lustre.testing.kube")

T = TypeVar("T")
Handler = Callable[["web.Request"], Awaitable["web.StreamResponse"]]


class TlsServer:
    """Serve ``handler`` over TLS on a thread of its own, with ``background()`` running beside it.

    ``on_stop`` runs on the loop as it shuts down, before the open websockets in ``sockets``
    (which the handler keeps) are closed: to end what else waits, such as watches.
    """

    def __init__(
        self,
        handler: Handler,
        background: Callable[[], Coroutine[Any, Any, None]],
        *,
        on_stop: Callable[[], None],
        sockets: set[Any],
    ) -> None:
        self._handler = handler
        self._background = background
        self._on_stop = on_stop
        self.sockets = sockets
        self.port = 0
        self.ca_pem = b""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None
        self._ssl: ssl.SSLContext | None = None
        self._ticker: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._loop is not None

    def start(self) -> None:
        """Generate the CA and certificate, bind a free port and start serving."""
        certs = make_certs("127.0.0.1")
        self.ca_pem = certs.ca_pem
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        with tempfile.TemporaryDirectory(prefix="kube-fake-") as tmp:
            cert, key = Path(tmp, "tls.crt"), Path(tmp, "tls.key")
            cert.write_bytes(certs.cert_pem)
            key.write_bytes(certs.key_pem)
            key.chmod(0o600)
            ctx.load_cert_chain(cert, key)
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self._serve(ctx))
            except BaseException as exc:
                failure.append(exc)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._shutdown())
            loop.close()

        self._thread = threading.Thread(target=run, name="kube-fake", daemon=True)
        self._thread.start()
        ready.wait(30)
        if failure:
            self._thread = None
            raise RuntimeError(f"KubeFake did not start: {failure[0]}") from failure[0]

    def stop(self) -> None:
        """Stop serving and wait for the thread to end."""
        if self._thread is None or self._loop is None:
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)
        self._thread = None

    async def _serve(self, ctx: ssl.SSLContext) -> None:
        from aiohttp import web

        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handler)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=ctx)
        await site.start()
        self._site, self._ssl = site, ctx
        self.port = site.port
        self._ticker = asyncio.get_running_loop().create_task(self._background())

    async def _shutdown(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
        self._on_stop()
        await self.close_sockets()
        if self._runner is not None:
            await self._runner.cleanup()

    async def close_sockets(self) -> int:
        """Close every open websocket; returns how many there were."""
        sockets = list(self.sockets)
        for ws in sockets:
            await ws.close()
        return len(sockets)

    def on_loop(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the server's loop and return its result."""

        async def call() -> T:
            return fn()

        return self.submit(call()).result(30)

    def submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        """Schedule ``coro`` on the server's loop."""
        if self._loop is None or self._thread is None:
            coro.close()
            raise RuntimeError("KubeFake is not running: call start() or use it as a context manager")
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    async def outage(self, seconds: float, on_down: Callable[[], None]) -> None:
        """Stop listening, drop every open connection, wait ``seconds``, listen again on the same port.

        ``on_down`` runs once the listener is gone (to end watches).
        """
        from aiohttp import web

        assert self._site is not None
        assert self._runner is not None
        await self._site.stop()
        on_down()
        await self.close_sockets()
        server = self._runner.server
        for handler in list(getattr(server, "_connections", ())):
            handler.force_close()
        await asyncio.sleep(seconds)
        self._site = web.TCPSite(self._runner, "127.0.0.1", self.port, ssl_context=self._ssl)
        await self._site.start()
        logger.debug("KubeFake is back after a %.1fs outage", seconds)

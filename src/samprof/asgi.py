"""The /debug/pprof endpoints as an ASGI application, to mount inside an
existing one (Starlette, FastAPI, Django's ASGI handler) so that they ride
on its port (and behind its auth)::

    import samprof.asgi
    from starlette.routing import Mount

    app.routes.append(Mount("/debug/pprof", app=samprof.asgi.PprofApp()))

Mounted (``root_path`` set, as Starlette's ``Mount`` does), or served as a
whole application at ``/debug/pprof/...``: both work. Each request runs in
the event loop's default executor, so a 30-second CPU capture holds a
worker thread, never the loop; a client that disconnects ends its capture.
The endpoints answer as :mod:`samprof.http` describes.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Awaitable, Callable, Dict, MutableMapping

from samprof.http import Request, Response, _MountedApp
from samprof.wsgi import _MAX_BODY, _sub_path

__all__ = ["PprofApp"]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Dict[str, Any]]]
Send = Callable[[Dict[str, Any]], Awaitable[None]]


class PprofApp(_MountedApp):
    """An ASGI application serving /debug/pprof.

    ``token`` and ``max_seconds`` are :class:`samprof.http.Endpoints`'s;
    ``heap=True`` starts a heap profile in each process at its first
    request to the endpoints, unless one runs.
    """

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        self.heap.ensure()
        body = await _read_body(receive)
        gone = threading.Event()
        watcher = asyncio.ensure_future(_watch_disconnect(receive, gone))
        path = scope.get("path", "")
        root = scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root) :]
        request = Request(
            path=_sub_path(path),
            query=scope.get("query_string", b"").decode("latin-1"),
            method=scope.get("method", "GET"),
            headers={k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]},
            body=body,
            disconnected=gone.is_set,
        )
        try:
            loop = asyncio.get_running_loop()
            response = await loop.run_in_executor(None, self.endpoints.handle, request)
        finally:
            watcher.cancel()
        if not gone.is_set():
            await _send(send, response, request.method == "HEAD")


async def _read_body(receive: Receive) -> bytes:
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b""
        chunk = message.get("body", b"")
        if size < _MAX_BODY:
            chunks.append(chunk[: _MAX_BODY - size])
            size += len(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _watch_disconnect(receive: Receive, gone: threading.Event) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            gone.set()
            return


async def _send(send: Send, response: Response, head: bool) -> None:
    headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in response.headers]
    headers.append((b"content-length", str(len(response.body)).encode()))
    await send({"type": "http.response.start", "status": response.status, "headers": headers})
    await send({"type": "http.response.body", "body": b"" if head else response.body})


async def _lifespan(receive: Receive, send: Send) -> None:
    """Served as a whole application: nothing to set up or tear down."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
